from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "ingest"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        import ingest.work_frames  # noqa: F401 (registers final messages, delivery results, guide.get, reports)
        from automation.changes import task_changes
        from ingest.consumers import PluginConsumer
        from ingest.models import ToolPolicy
        from ingest.panel import frames as panel_frames
        from ingest.panel.push import tasks_changed
        from ingest.signals import tool_policies_changed
        from ingest.sites import frames as sites_frames

        # The panel's and the sites' frames: the consumer imports both packages, so they are registered from here.
        for frame_type, handler in [*panel_frames.FRAME_HANDLERS.items(), *sites_frames.FRAME_HANDLERS.items()]:
            PluginConsumer.frame_handler(frame_type)(handler)
        # Every change of a policy gives the policies a new version token (ingest.signals).
        post_save.connect(tool_policies_changed, sender=ToolPolicy, dispatch_uid="tool_policies_changed_save")
        post_delete.connect(tool_policies_changed, sender=ToolPolicy, dispatch_uid="tool_policies_changed_delete")
        # What the person's side panel shows follows every change of a block's task (ingest.panel.push).
        task_changes.subscribe(tasks_changed)
