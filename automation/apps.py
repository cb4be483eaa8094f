from django.apps import AppConfig


class AutomationConfig(AppConfig):
    """The task engine: tasks, their transitions, the claim, the dispatcher and its loop."""

    name = "automation"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from automation.schedules import schedules_register

        post_migrate.connect(schedules_register, sender=self)
