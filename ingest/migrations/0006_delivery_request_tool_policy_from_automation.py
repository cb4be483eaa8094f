"""``DeliveryRequest`` and ``ToolPolicy`` join ``ingest``, where their services are.

The models take over the engine's tables as they stand (``db_table`` names
them), so the database is not touched: only the migration state moves. Their
content types move with them, so the permissions granted on them and the
admin log entries about them stay attached.
"""

import django.db.models.deletion
from django.db import migrations, models

import ingest.models

MOVED = ("deliveryrequest", "toolpolicy")


def content_types_move(apps, schema_editor, *, source, destination):
    """Relabel the moved models' content types, unless the destination already has its own."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    types = ContentType.objects.using(schema_editor.connection.alias)
    for model in MOVED:
        if not types.filter(app_label=destination, model=model).exists():
            types.filter(app_label=source, model=model).update(app_label=destination)


def to_ingest(apps, schema_editor):
    content_types_move(apps, schema_editor, source="automation", destination="ingest")


def to_automation(apps, schema_editor):
    content_types_move(apps, schema_editor, source="ingest", destination="automation")


class Migration(migrations.Migration):

    dependencies = [
        ("automation", "0009_delivery_request_tool_policy_to_ingest"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("conversations", "0007_handle"),
        ("ingest", "0005_adapter_report"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="DeliveryRequest",
                    fields=[
                        ("request_id", models.CharField(default=ingest.models.new_request_id, max_length=64, primary_key=True, serialize=False)),
                        ("method", models.CharField(default="http", max_length=16)),
                        ("delivered", models.BooleanField(default=False)),
                        ("sent_at", models.BigIntegerField()),
                        ("answered_at", models.BigIntegerField(blank=True, null=True)),
                        ("result", models.JSONField(blank=True, null=True)),
                        ("client", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="ingest.pluginclient")),
                        ("task", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="delivery_requests", to="automation.automationtask")),
                    ],
                    options={
                        "db_table": "automation_deliveryrequest",
                        "indexes": [models.Index(fields=["client", "sent_at"], name="delivery_request_client_idx")],
                    },
                ),
                migrations.CreateModel(
                    name="ToolPolicy",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("target", models.CharField(default="conductor", help_text="conductor, or the name of an MCP server.", max_length=64)),
                        ("tool", models.CharField(blank=True, help_text="A tool of the target, e.g. shell.run; blank: every tool of an MCP server.", max_length=128)),
                        ("policy", models.CharField(choices=[("allow", "Allow"), ("approve", "Needs approval"), ("deny", "Deny")], max_length=16)),
                        ("note", models.CharField(blank=True, max_length=200)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("client", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="tool_policies", to="ingest.pluginclient")),
                        ("conversation", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="tool_policies", to="conversations.conversation")),
                    ],
                    options={
                        "verbose_name_plural": "tool policies",
                        "db_table": "automation_toolpolicy",
                        "constraints": [
                            models.UniqueConstraint(condition=models.Q(("client__isnull", True), ("conversation__isnull", True)), fields=("target", "tool"), name="tool_policy_global_uniq"),
                            models.UniqueConstraint(condition=models.Q(("client__isnull", False), ("conversation__isnull", True)), fields=("target", "tool", "client"), name="tool_policy_client_uniq"),
                            models.UniqueConstraint(condition=models.Q(("client__isnull", True), ("conversation__isnull", False)), fields=("target", "tool", "conversation"), name="tool_policy_conversation_uniq"),
                            models.UniqueConstraint(condition=models.Q(("client__isnull", False), ("conversation__isnull", False)), fields=("target", "tool", "client", "conversation"), name="tool_policy_client_conversation_uniq"),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(to_ingest, to_automation),
    ]
