from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "ingest"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from ingest.models import ToolPolicy
        from ingest.signals import tool_policies_changed

        # Every change of a policy gives the policies a new version token (ingest.signals).
        post_save.connect(tool_policies_changed, sender=ToolPolicy, dispatch_uid="tool_policies_changed_save")
        post_delete.connect(tool_policies_changed, sender=ToolPolicy, dispatch_uid="tool_policies_changed_delete")
