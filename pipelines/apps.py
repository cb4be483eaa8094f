from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    """The task kinds' pipelines (SPEC §3): each kind's executor and what follows its outcome."""

    name = "pipelines"

    def ready(self) -> None:
        # Importing these registers the kinds, their schedules and the tools that read tasks.
        from pipelines import deliveries, instructions, mail, renewal, tools  # noqa: F401
