from django.apps import AppConfig


class AutomationConfig(AppConfig):
    name = "automation"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        # Importing these fills the registries: the tools, and the kinds' executors.
        from automation import executors  # noqa: F401
        from automation.schedules import schedules_register
        from automation.tools import catalog  # noqa: F401

        post_migrate.connect(schedules_register, sender=self)
