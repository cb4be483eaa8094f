"""The conversations app's data migrations: delivered messages' dedupe keys; a conversation's owner in its key."""

import pytest
from django.db import IntegrityError, connection, transaction
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


OWNERS_BEFORE = [("conversations", "0009_delivered_dedupe_key"), ("ingest", "0007_pluginclient_owner")]
OWNERS_AFTER = [("conversations", "0010_owner_in_conversation_key")]


def test_every_conversation_takes_its_first_clients_owner_and_the_key_holds_the_owner():
    executor = MigrationExecutor(connection)
    executor.migrate(OWNERS_BEFORE)
    apps = executor.loader.project_state(OWNERS_BEFORE).apps
    Conversation, Message = apps.get_model("conversations", "Conversation"), apps.get_model("conversations", "Message")
    Link, Client = apps.get_model("conversations", "ConversationLink"), apps.get_model("ingest", "PluginClient")
    now = timezone.now()
    laptop, desktop, bobs = (Client.objects.create(client_id=name, token_hash=name, owner=owner)
                             for name, owner in (("laptop", "alice"), ("desktop", "alice"), ("bobs", "bob")))

    def conversation(remote_id, owner, *, links=(), messages=()):
        made = Conversation.objects.create(platform="claude", remote_id=remote_id, owner=owner, last_activity_at=now)
        for client in links:
            Link.objects.create(conversation=made, client=client, last_seen_at=now)
        for number, (client, source) in enumerate(messages):
            Message.objects.create(conversation=made, role="assistant", source=source, text="hi", client=client,
                                   dedupe_key=f"id:{remote_id}-{number}", received_at=now)
        return made.pk

    # Made before owners, given `default` by 0008: its client has been given to alice since.
    before_owners = conversation("c-old", "default", links=[laptop, desktop], messages=[(bobs, "plugin")])
    # Alice's, with bob's client's message stored in it (another owner's client, no link).
    alices = conversation("c-alice", "alice", links=[desktop], messages=[(bobs, "plugin"), (desktop, "plugin")])
    # Unclaimed (replayed) and then sent into by a client that recorded no link; and one no client ever sent.
    unclaimed_sent = conversation("c-sent", "", messages=[(None, "replay"), (bobs, "conductor"), (laptop, "replay")])
    unclaimed = conversation("c-none", "", messages=[(None, "replay")])
    messages_before = dict(Message.objects.values_list("pk", "conversation_id"))
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(OWNERS_AFTER)
        apps = executor.loader.project_state(OWNERS_AFTER).apps
        Conversation = apps.get_model("conversations", "Conversation")
        owners = dict(Conversation.objects.values_list("pk", "owner"))
        assert owners == {before_owners: "alice", alices: "alice", unclaimed_sent: "alice", unclaimed: ""}
        # Messages stay where they are.
        assert dict(apps.get_model("conversations", "Message").objects.values_list("pk", "conversation_id")) == (
            messages_before)
        # Another owner's chat with the same id is a conversation of its own; the same owner's is refused.
        Conversation.objects.create(platform="claude", remote_id="c-alice", owner="bob", last_activity_at=now)
        with pytest.raises(IntegrityError), transaction.atomic():
            Conversation.objects.create(platform="claude", remote_id="c-alice", owner="alice", last_activity_at=now)
    finally:
        Conversation.objects.filter(owner="bob").delete()
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
