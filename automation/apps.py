from django.apps import AppConfig


class AutomationConfig(AppConfig):
    """The task engine: tasks, their transitions, the claim, the dispatcher and its loop."""

    name = "automation"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_migrate, post_save

        from automation.models import ToolPolicy
        from automation.schedules import schedules_register
        from automation.signals import tool_policies_changed

        post_migrate.connect(schedules_register, sender=self)
        post_save.connect(tool_policies_changed, sender=ToolPolicy, dispatch_uid="tool_policies_changed_save")
        post_delete.connect(tool_policies_changed, sender=ToolPolicy, dispatch_uid="tool_policies_changed_delete")
