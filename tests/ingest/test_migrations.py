"""``DeliveryRequest`` and ``ToolPolicy`` moved from ``automation`` to ``ingest``: rows, rights and pages stay.

A database is taken back to before the move, filled through the models as they
were then (in ``automation``), and migrated forward: the same tables hold the
same rows for the models in ``ingest``, a permission granted on a moved model
still holds (its content type moved with it), and the admin page's old
address leads to the new one.
"""

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from automation.models import AutomationTask
from ingest.models import DeliveryRequest, PluginClient, ToolPolicy

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("automation", "0008_task_outcome_series_kind_pause"), ("ingest", "0005_adapter_report")]
AFTER = [("ingest", "0006_delivery_request_tool_policy_from_automation")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


@pytest.fixture
def before_the_move():
    apps = migrate(BEFORE)
    yield apps
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_move_keeps_every_row_its_permissions_and_the_admin_address(before_the_move, client, django_user_model):
    apps = before_the_move
    assert not {"toolpolicy", "deliveryrequest"} & {m._meta.model_name for m in apps.get_app_config("ingest").get_models()}
    Client = apps.get_model("ingest", "PluginClient")
    Task = apps.get_model("automation", "AutomationTask")
    OldPolicy, OldRequest = apps.get_model("automation", "ToolPolicy"), apps.get_model("automation", "DeliveryRequest")
    laptop = Client.objects.create(client_id="laptop", name="laptop", token_hash="x")
    Task.objects.create(task_id="t1", kind="instruction.deliver", status="succeeded", execute_after=0, max_attempts=3,
                        sequence=1, created_at=0, updated_at=0, payload_json="{}")
    OldPolicy.objects.create(tool="shell.run", policy="deny", note="global")
    policy = OldPolicy.objects.create(tool="shell.run", policy="allow", client=laptop)
    OldRequest.objects.create(request_id="r1", task_id="t1", client=laptop, method="dom", delivered=True, sent_at=5,
                              answered_at=6, result={"ok": True})
    # The content type as it was: the permissions of the moved model hang on it.
    old_type = ContentType.objects.get(app_label="automation", model="toolpolicy")
    change = Permission.objects.get(content_type=old_type, codename="change_toolpolicy")
    operator = django_user_model.objects.create_user("operator", is_staff=True, is_superuser=False)
    operator.user_permissions.add(change)

    migrate(AFTER)
    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    assert ToolPolicy._meta.db_table == "automation_toolpolicy"
    assert DeliveryRequest._meta.db_table == "automation_deliveryrequest"
    assert sorted(ToolPolicy.objects.values_list("policy", "note", "client__client_id")) == [
        ("allow", "", "laptop"), ("deny", "global", None),
    ]
    request = DeliveryRequest.objects.select_related("task", "client").get()
    assert (request.pk, request.task, request.client, request.method, request.delivered, request.result) == (
        "r1", AutomationTask.objects.get(pk="t1"), PluginClient.objects.get(client_id="laptop"), "dom", True,
        {"ok": True},
    )
    assert list(PluginClient.objects.get(client_id="laptop").tool_policies.all()) == [ToolPolicy.objects.get(pk=policy.pk)]
    # New rows go on after the old ones (the table's own id sequence).
    assert ToolPolicy.objects.create(tool="files.read", policy="allow").pk > policy.pk

    moved_type = ContentType.objects.get_for_model(ToolPolicy)
    assert (moved_type.pk, moved_type.app_label) == (old_type.pk, "ingest")
    assert not ContentType.objects.filter(app_label="automation", model__in=["toolpolicy", "deliveryrequest"]).exists()
    operator = django_user_model.objects.get(pk=operator.pk)
    assert operator.has_perm("ingest.change_toolpolicy")

    superuser = django_user_model.objects.create_superuser("admin", "admin@example.com", password=None)
    client.force_login(superuser)
    response = client.get(f"/admin/automation/toolpolicy/{policy.pk}/change/?_changelist_filters=x")
    assert (response.status_code, response["Location"]) == (
        301, f"/admin/ingest/toolpolicy/{policy.pk}/change/?_changelist_filters=x"
    )
    page = client.get(response["Location"])
    assert page.status_code == 200 and "shell.run" in page.content.decode()


DELIVERED_BEFORE = [("ingest", "0012_tool_policy_allow_network"), ("automation", "0014_dispatcherworker_key_fingerprint")]
DELIVERED_AFTER = [("ingest", "0013_instruction_reopened_since_delivery")]


def test_the_open_blocks_of_a_delivered_message_count_as_reopened():
    """Blocks retried before the upgrade: their new results go in a follow-up, the others are not sent again."""
    apps = migrate(DELIVERED_BEFORE)
    Conversation, Message = apps.get_model("conversations", "Conversation"), apps.get_model("conversations", "Message")
    Instruction, Task = apps.get_model("ingest", "Instruction"), apps.get_model("automation", "AutomationTask")
    from django.utils import timezone

    conversation = Conversation.objects.create(platform="claude", remote_id="c1", last_activity_at=timezone.now())

    def message(name, *statuses, delivered):
        made = Message.objects.create(conversation=conversation, role="assistant", source="plugin", text=name,
                                      dedupe_key=f"id:{name}", received_at=timezone.now())
        for index, status in enumerate(statuses, 1):
            Instruction.objects.create(message=made, block_index=index, raw_text="x", status=status)
        if delivered:
            Task.objects.create(kind="instruction.deliver", status="succeeded", message_id=made.pk, execute_after=0,
                                max_attempts=5, target_conversation_id="c1",
                                sequence=made.pk, created_at=0, updated_at=0, dedupe_key=f"deliver:{made.pk}")
        return made.pk

    done = message("done", "succeeded", "failed", delivered=True)
    retried = message("retried", "succeeded", "pending", delivered=True)
    waiting = message("waiting", "succeeded", "awaiting_approval", delivered=False)
    try:
        apps = migrate(DELIVERED_AFTER)
        rows = apps.get_model("ingest", "Instruction").objects.values_list(
            "message_id", "status", "reopened_since_delivery",
        )
        assert sorted(rows) == sorted([
            (done, "succeeded", False), (done, "failed", False),
            (retried, "succeeded", False), (retried, "pending", True),
            (waiting, "succeeded", False), (waiting, "awaiting_approval", False),
        ])
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
