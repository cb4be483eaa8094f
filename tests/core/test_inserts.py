"""``insert_unless_taken``: a row in one statement, or nothing when a unique key of it is taken."""

import pytest
from django.db import transaction
from django.utils import timezone

from conversations.models import Conversation, Message
from core.inserts import insert_unless_taken

pytestmark = pytest.mark.django_db(transaction=True)


def message(conversation, key, text="hi"):
    return Message(conversation=conversation, role="user", source="conductor", text=text, raw_frame={},
                   dedupe_key=key, received_at=timezone.now())


def test_an_inserted_row_gets_its_key_and_a_taken_key_inserts_nothing_and_keeps_the_transaction():
    conversation = Conversation.objects.create(platform="claude", remote_id="c1", last_activity_at=timezone.now())
    first = message(conversation, "delivery:t1")
    assert insert_unless_taken(first)
    assert first.pk is not None and not first._state.adding
    with transaction.atomic():
        again = message(conversation, "delivery:t1", text="other")
        assert not insert_unless_taken(again)
        assert again.pk is None
        other = message(conversation, "delivery:t2")
        assert insert_unless_taken(other)  # the transaction goes on: no savepoint was needed
    assert dict(Message.objects.values_list("dedupe_key", "text")) == {"delivery:t1": "hi", "delivery:t2": "hi"}


def test_rows_without_a_unique_value_are_all_inserted():
    conversation = Conversation.objects.create(platform="claude", remote_id="c2", last_activity_at=timezone.now())
    assert insert_unless_taken(message(conversation, None)) and insert_unless_taken(message(conversation, None))
    assert Message.objects.filter(conversation=conversation).count() == 2
