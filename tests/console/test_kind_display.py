"""A kind says how the console shows its tasks (``KindDisplay``): a new kind needs nothing in ``console/``.

Two kinds exist only here, registered with displays of their own: the story,
what the conversation waits on, the task list and a task's page show them as
their specs say, through the test client.
"""

import pytest

from automation.kinds import Detail, KindDisplay, KindSpec, StoryHeading, always, kinds
from automation.services.tasks import task_create
from console.admin.tasks import call_summary
from console.story import conversation_story, conversation_waits
from tests.factories import ConversationFactory, MessageFactory

pytestmark = pytest.mark.django_db

CONVERSATIONS = "/admin/conversations/conversation/"
TASKS = "/admin/automation/automationtask/"


def parcel_heading(task, conversation_id):
    return StoryHeading(
        f"parcel {task.payload['label']} for @{task.payload['to']}",
        direction="out",
        other_conversation_id=task.payload["to_conversation_id"],
    )


def parcel_details(task):
    return [
        Detail("to", f"@{task.payload['to']}", conversation_id=task.payload["to_conversation_id"]),
        Detail("contents", task.payload["contents"], is_long=True),
    ]


PARCEL = KindSpec(
    name="test.parcel", lane=None, is_idempotent=always,
    display=KindDisplay(noun="parcel", heading=parcel_heading, details_title="Parcel", details=parcel_details),
)
STEP = KindSpec(name="test.step", lane=None, is_idempotent=always, display=KindDisplay(noun="step", is_block=True))


@pytest.fixture(autouse=True)
def display_kinds():
    for spec in (PARCEL, STEP):
        kinds.register(spec)
    yield
    for spec in (PARCEL, STEP):
        kinds.unregister(spec.name)


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("admin", "admin@example.com", password=None))
    return client


def parcel(conversation, recipient):
    task, _ = task_create(
        kind="test.parcel", actor="test", conversation_id=conversation.pk,
        payload={"label": "P-7", "to": "reader", "to_conversation_id": recipient.pk, "contents": "<b>two books</b>"},
    )
    return task


def step(conversation, message, tool="files.read"):
    task, _ = task_create(
        kind="test.step", actor="test", conversation_id=conversation.pk, message_id=message.pk,
        payload={"tool": tool, "params": {"path": "a.md"}},
    )
    return task


def test_the_story_heads_a_task_as_its_kind_says_and_links_the_conversation_it_names(admin_client):
    conversation, recipient = ConversationFactory(), ConversationFactory(title="Reader")
    task = parcel(conversation, recipient)
    page = admin_client.get(f"{CONVERSATIONS}{conversation.pk}/story/").content.decode()
    assert "Parcel P-7 for @reader" in page
    assert f"{CONVERSATIONS}{recipient.pk}/story/" in page
    [entry] = [e for e in conversation_story(conversation=conversation).entries if e.kind == "task"]
    assert (entry.row.pk, entry.view.direction, entry.view.other_conversation) == (task.pk, "out", recipient)


def test_a_block_kinds_tasks_show_with_their_message_and_are_counted_by_its_noun(admin_client):
    conversation = ConversationFactory()
    message = MessageFactory(conversation=conversation)
    step(conversation, message)
    step(conversation, message)
    parcel(conversation, ConversationFactory())
    entries = conversation_story(conversation=conversation).entries
    assert [e.row.kind for e in entries if e.kind == "task"] == ["test.parcel"]
    waits = [wait.text for wait in conversation_waits(conversation)]
    assert waits[0] == "2 steps queued"
    assert waits[1].startswith("parcel queued")


def test_the_task_pages_show_a_block_kinds_call_and_a_kinds_own_section(admin_client):
    conversation, recipient = ConversationFactory(), ConversationFactory(title="Reader")
    message = MessageFactory(conversation=conversation)
    assert call_summary("test.step", '{"tool": "files.read", "params": {"path": "a.md"}}') == (
        "files.read", '{"path":"a.md"}'
    )
    assert call_summary("test.parcel", '{"label": "P-7", "to_conversation_id": 3}') == (
        "test.parcel", '{"label":"P-7"}'
    )
    listing = admin_client.get(TASKS).content.decode()
    assert listing.count("test.parcel") == 0  # no task yet
    block, sent = step(conversation, message), parcel(conversation, recipient)

    block_page = admin_client.get(f"{TASKS}{block.pk}/change/").content.decode()
    assert "held-call" in block_page and "files.read" in block_page

    page = admin_client.get(f"{TASKS}{sent.pk}/change/").content.decode()
    assert "<h2>Parcel</h2>" in page or ">Parcel<" in page
    assert "@reader" in page and f"{CONVERSATIONS}{recipient.pk}/change/" in page
    assert "&lt;b&gt;two books&lt;/b&gt;" in page and "<b>two books</b>" not in page
    assert "held-call" not in page
