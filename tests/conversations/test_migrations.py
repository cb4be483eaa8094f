"""The data migration that gives the messages Conductor delivered their task's dedupe key."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("conversations", "0008_owner_and_moves")]
AFTER = [("conversations", "0009_delivered_dedupe_key")]


def test_delivered_messages_take_their_tasks_key_and_others_keep_theirs():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    Conversation, Message = apps.get_model("conversations", "Conversation"), apps.get_model("conversations", "Message")
    conversation = Conversation.objects.create(platform="claude", remote_id="c1", last_activity_at=timezone.now())

    def message(text, source, frame, dedupe_key=None):
        return Message.objects.create(conversation=conversation, role="user", source=source, text=text,
                                      raw_frame=frame, dedupe_key=dedupe_key, received_at=timezone.now()).pk

    delivered = message("results", "conductor", {"delivery_key": "t1"})
    repeated = message("results again", "conductor", {"delivery_key": "t1"})
    no_key = message("renewal of old", "conductor", {})
    captured = message("hi", "plugin", {"delivery_key": "t2"}, dedupe_key="id:m1")
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        apps = executor.loader.project_state(AFTER).apps
        keys = dict(apps.get_model("conversations", "Message").objects.values_list("pk", "dedupe_key"))
        assert keys == {delivered: "delivery:t1", repeated: None, no_key: None, captured: "id:m1"}
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
