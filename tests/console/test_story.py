"""A conversation's story in the admin: what it asked for, what ran, what came back, what it waits on.

The scenario goes through the real ingest, transitions and follow-ups; the
page through the test client; the selector (``console.story``) on its own.
"""

import datetime as dt
import html
import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from automation.kinds import kinds
from automation.models import AutomationTask, TaskStatus
from automation.services import transitions as tr
from automation.services.tasks import task_create
from console.story import Bound, Cursor, conversation_story
from conversations.models import Conversation, ConversationMove, Message
from conversations.services import delivered_message_store
from core.clock import datetime_from_ms
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import DeliveryRequest, Instruction
from ingest.services.messages import message_ingest
from pipelines.mail import MAIL_DELIVER
from tests.factories import (
    T0,
    ConversationFactory,
    InstructionFactory,
    MessageFactory,
    PluginClientFactory,
    make_staff,
    make_task,
    task_lease,
    lease_of,
)

pytestmark = pytest.mark.django_db

S = TaskStatus
NOW = 1_900_000_000_000
CONVERSATIONS = "/admin/conversations/conversation/"
TASKS = "/admin/automation/automationtask/"
HOSTILE = "<script>alert('story')</script>"

TEXT = f"""I will look around first. {HOSTILE}

```baa
echo
{{"step": 1}}
```

Then read the notes:

```baa
files.read
{{"path": "missing.md"}}
```

```baa
bad header!
```

And list the folder:

```baa
shell.run
{{"argv": ["ls", "-la"], "cwd": "src"}}
```
Done."""


def story_url(conversation, **query):
    url = f"{CONVERSATIONS}{conversation.pk}/story/"
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def ingest(text, message_id="m1", client_id="laptop"):
    client = PluginClientFactory(client_id=f"{client_id}-{message_id}")
    frame = {
        "type": "browser.final_message",
        "platform": "claude",
        "conversation_id": "c1",
        "title": "Release",
        "message_id": message_id,
        "text": text,
    }
    result = message_ingest(message=parse_final_message(frame), client=client)
    return Message.objects.get(pk=result.message_id)


def run(task, *, result=None, error=None, owner="d1"):
    """Run the task as the dispatcher does: its outcome, then its kind's follow-up."""
    task_lease(task.pk, lease_owner=owner, lease_until=NOW + 60_000, now=NOW)
    tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=NOW + 60_000, now=NOW)
    if error is None:
        task = tr.task_succeed(task.pk, lease=lease_of(task.pk), result=result, now=NOW)
    else:
        task = tr.task_fail(
            task.pk, lease=lease_of(task.pk), error=error, result=result, now=NOW
        )
    kinds.follow_up(task, actor=owner)
    return task


def block_tasks(message):
    return {
        task.instruction.tool: task
        for task in AutomationTask.objects.filter(
            kind=INSTRUCTION_EXECUTE, message=message
        ).select_related("instruction")
    }


@pytest.fixture
def admin_user(django_user_model):
    # No password: hashing one costs about a second on a loaded machine, and force_login needs none.
    return django_user_model.objects.create_superuser(
        "admin", "admin@example.com", password=None
    )


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.fixture
def workspace(settings, tmp_path):
    settings.CONDUCTOR_WORKSPACE = tmp_path / "workspace"
    (tmp_path / "workspace" / "src").mkdir(parents=True)
    return (tmp_path / "workspace").resolve()


@pytest.fixture
def held(workspace):
    """A message whose blocks succeeded (echo), failed (files.read), were rejected (bad header) and wait (shell.run)."""
    message = ingest(TEXT)
    tasks = block_tasks(message)
    run(tasks["echo"], result={"step": 1, "echoed": HOSTILE})
    run(tasks["files.read"], error="missing.md: no such file")
    return message


def delivered(conversation, message):
    """An earlier message whose one block ran and whose results went out by http on the second try."""
    earlier = ingest('```baa\necho\n{"n": 0}\n```', message_id="m0")
    run(block_tasks(earlier)["echo"], result={"n": 0})
    delivery = AutomationTask.objects.get(kind=INSTRUCTION_DELIVER, message=earlier)
    client = PluginClientFactory(client_id="desk")
    DeliveryRequest.objects.create(
        task=delivery,
        client=client,
        method="http",
        sent_at=NOW,
        answered_at=NOW + 5,
        result={"ok": True, "status": 502, "error": None, "error_code": None},
    )
    DeliveryRequest.objects.create(
        task=delivery,
        client=client,
        method="http",
        sent_at=NOW + 10,
        answered_at=NOW + 20,
        delivered=True,
        result={"ok": True, "status": 200},
    )
    sent = delivered_message_store(
        task_id=delivery.pk,
        conversation_id=conversation.pk,
        client_pk=client.pk,
        text="Conductor results for 1 block <b>bold</b>",
        frame={"delivery_key": delivery.pk},
        remote_message_id="",
    )
    task_lease(delivery.pk, lease_owner="d1", lease_until=NOW + 60_000, now=NOW)
    tr.task_start(delivery.pk, lease=lease_of(delivery.pk), lease_until=NOW + 60_000, now=NOW)
    tr.task_succeed(
        delivery.pk,
        lease=lease_of(delivery.pk),
        result={"method": "http", "status": 200, "message_id": sent.pk},
        now=NOW,
    )
    return delivery, sent


def page_of(client, conversation, **query):
    response = client.get(story_url(conversation, **query))
    assert response.status_code == 200
    return response.content.decode()


def section(page, element_id):
    """The element with ``element_id`` up to the next element with an id of the same kind (a story entry)."""
    start = page.index(f'id="{element_id}"')
    end = page.find('<li class="story-entry', start + 1)
    return page[start:] if end < 0 else page[start:end]


# --- permissions ---------------------------------------------------------------------------


def test_the_story_needs_a_staff_login(client):
    conversation = ConversationFactory()
    response = client.get(story_url(conversation))
    assert response.status_code == 302 and response["Location"].startswith(
        "/admin/login/"
    )


@pytest.mark.parametrize(
    "permissions,expected",
    [
        ((), 403),
        (
            ("conversations.view_conversation",),
            403,
        ),  # the story shows tasks and their results
        (("automation.view_automationtask",), 403),
        (("conversations.view_conversation", "automation.view_automationtask"), 200),
    ],
)
def test_the_story_needs_the_view_permission_of_conversations_and_tasks(
    client, permissions, expected
):
    conversation = ConversationFactory()
    client.force_login(make_staff("viewer", *permissions, password=None))
    assert client.get(story_url(conversation)).status_code == expected


def test_an_unknown_conversation_or_a_bad_cursor_is_answered_not_crashed(admin_client):
    conversation = ConversationFactory()
    assert admin_client.get(f"{CONVERSATIONS}999999/story/").status_code == 404
    for bad in (
        "x",
        "1.2",
        "1.9.3",
        "1.0.notanint",
        "-5.0.1",
        "9" * 40 + ".0.1",
        "1.1.",
    ):
        assert (
            admin_client.get(story_url(conversation, before=bad)).status_code == 400
        ), bad
    assert admin_client.get(story_url(conversation, message="abc")).status_code == 400


# --- what the story tells --------------------------------------------------------------------


def test_a_message_shows_its_blocks_where_they_sit_and_what_came_of_each(
    admin_client, held, workspace
):
    page = page_of(admin_client, held.conversation)
    entry = section(page, f"message-{held.pk}")
    # The text, with the four blocks marked in it, in order.
    marks = re.findall(
        r'<div class="story-mark (\w+)">\s*<div class="story-mark-label">block (\d) · ([\w.]+|\(no tool\))',
        entry,
    )
    assert marks == [
        ("ok", "1", "echo"),
        ("failed", "2", "files.read"),
        ("rejected", "3", "(no tool)"),
        ("held", "4", "shell.run"),
    ]
    assert (
        "I will look around first." in entry
        and "Then read the notes:" in entry
        and "Done." in entry
    )
    instructions = {i.block_index: i for i in Instruction.objects.filter(message=held)}
    ok, failed, rejected, waiting = (
        section(entry, f"block-{instructions[n].pk}") for n in (1, 2, 3, 4)
    )
    assert "succeeded" in ok and "&quot;echoed&quot;" in ok and "story-result" in ok
    assert "failed" in failed and "missing.md: no such file" in failed
    assert "rejected at ingest" in rejected and "bad header" in rejected
    # The held block: its exact call, resolved as shell.run resolves it, and the forms to decide.
    assert "held for approval" in waiting
    assert "[&quot;ls&quot;, &quot;-la&quot;]" in waiting
    assert f"<pre>{workspace / 'src'}</pre>" in waiting
    assert (
        'name="decision" value="approve"' in waiting
        and 'name="decision" value="reject"' in waiting
    )
    assert "csrfmiddlewaretoken" in waiting
    # What it waits on now.
    now = section(page, "story-now")
    assert "1 instruction awaiting approval" in now


def test_the_story_shows_the_delivery_the_mail_and_the_pause_with_their_actors(
    admin_client, admin_user, held
):
    conversation = held.conversation
    conversation.handle = "release"
    conversation.save()
    delivery, sent = delivered(conversation, held)
    sender = ConversationFactory(handle="reviewer", title="Review")
    mail, _ = task_create(
        kind=MAIL_DELIVER,
        actor="mail.send",
        conversation_id=conversation.pk,
        payload={
            "from_conversation_id": sender.pk,
            "from_handle": "reviewer",
            "to": "release",
            "text": "Mail from @reviewer: ship it",
        },
    )
    admin_client.post(
        CONVERSATIONS,
        {"action": "pause", ACTION_CHECKBOX_NAME: [conversation.pk], "index": 0},
    )

    page = page_of(admin_client, conversation)
    entry = section(page, f"task-{delivery.pk}")
    assert "Delivery of the results of message" in entry and "succeeded" in entry
    assert "attempts 1/3" in entry
    assert (
        entry.count("<td>http</td>") == 2
        and "HTTP 502" in entry
        and "delivered (" in entry
    )
    assert (
        "text sent" in entry
        and "Conductor results for 1 block &lt;b&gt;bold&lt;/b&gt;" in entry
    )
    # The delivered text is shown with its delivery, not again as a message of its own.
    assert f'id="message-{sent.pk}"' not in page
    mail_entry = section(page, f"task-{mail.pk}")
    assert (
        "Mail from @reviewer" in mail_entry
        and "ship it" in mail_entry
        and "Review" in mail_entry
    )
    log = LogEntry.objects.get(object_id=str(conversation.pk), change_message="Paused")
    pause = section(page, f"log-{log.pk}")
    assert admin_user.username in pause and "Paused" in pause
    now = section(page, "story-now")
    assert (
        "paused: its tasks are not claimed" in now
        and "1 instruction awaiting approval" in now
    )
    # Time order: the held message, the next one and its delivery, the mail, the pause.
    order = [
        page.index(f'id="{anchor}"')
        for anchor in (
            f"message-{held.pk}",
            f"message-{delivery.message_id}",
            f"task-{delivery.pk}",
            f"task-{mail.pk}",
            f"log-{log.pk}",
        )
    ]
    assert order == sorted(order)


def test_mail_sent_by_a_block_shows_in_the_senders_story(admin_client):
    sender = ConversationFactory(handle="writer")
    message = MessageFactory(conversation=sender)
    recipient = ConversationFactory(handle="reader", title="Reader chat")
    mail, _ = task_create(
        kind=MAIL_DELIVER,
        actor="mail.send",
        conversation_id=recipient.pk,
        message_id=message.pk,
        payload={
            "from_conversation_id": sender.pk,
            "from_handle": "writer",
            "to": "reader",
            "text": "hello reader",
        },
    )
    entry = section(page_of(admin_client, sender), f"task-{mail.pk}")
    assert (
        "Mail to @reader" in entry
        and "hello reader" in entry
        and "Reader chat" in entry
    )


def test_hostile_text_in_a_message_and_a_result_is_shown_escaped(admin_client, held):
    page = page_of(admin_client, held.conversation)
    assert "<script>alert" not in page
    escaped = "&lt;script&gt;alert(&#x27;story&#x27;)&lt;/script&gt;"
    message_text = section(page, f"message-{held.pk}").split('class="story-outcomes"')[
        0
    ]
    assert escaped in message_text
    echo = Instruction.objects.get(message=held, tool="echo")
    assert escaped in section(page, f"block-{echo.pk}").split("story-result")[1]


def test_a_lone_surrogate_in_a_result_does_not_break_the_page(admin_client):
    message = MessageFactory(text="```baa\necho\n```")
    instruction = Instruction.objects.create(
        message=message,
        block_index=1,
        raw_text="echo",
        target="conductor",
        tool="echo",
        params={},
        status=Instruction.Status.SUCCEEDED,
    )
    task = make_task(
        S.RUNNING,
        kind=INSTRUCTION_EXECUTE,
        conversation_id=message.conversation_id,
        message_id=message.pk,
        instruction_id=instruction.pk,
    )
    AutomationTask.objects.filter(pk=task.pk).update(
        result_json='{"text": "\\ud800 half"}'
    )
    assert "\ufffd half" in page_of(admin_client, message.conversation)


def test_long_texts_are_folded_and_cut(admin_client):
    message = MessageFactory(text="line\n" * 40 + "x" * 30_000)
    entry = section(
        page_of(admin_client, message.conversation), f"message-{message.pk}"
    )
    assert "<details><summary>line … (41 lines)</summary>" in entry
    assert (
        "more characters" in entry
        and f"/admin/conversations/message/{message.pk}/change/" in entry
    )


@pytest.mark.parametrize(
    "setup,expected",
    [
        ("idle_off", "idle; renewal is off"),
        ("idle_on", "idle, renewal due at"),
        ("in_flight", "delivery of results in flight, attempt 1 of 3"),
        ("retry_wait", "delivery of results waiting to retry after attempt 1 of 3"),
    ],
)
def test_what_the_conversation_waits_on_now(admin_client, setup, expected):
    conversation = ConversationFactory(
        renewal_enabled=setup == "idle_on",
        last_activity_at=timezone.now() + dt.timedelta(hours=1),
    )
    if setup in ("in_flight", "retry_wait"):
        make_task(
            S.RUNNING if setup == "in_flight" else S.RETRY_WAIT,
            kind=INSTRUCTION_DELIVER,
            conversation_id=conversation.pk,
        )
    assert expected in section(page_of(admin_client, conversation), "story-now")


# --- pages -----------------------------------------------------------------------------------


def _all_keys(conversation, limit):
    """Walk the story from its latest page to its first; return every entry's key, oldest first."""
    story = conversation_story(conversation=conversation, limit=limit)
    pages = [story]
    while story.earlier is not None:
        story = conversation_story(
            conversation=conversation,
            bound=Bound(story.earlier, older=True),
            limit=limit,
        )
        pages.append(story)
    return [(e.kind, e.row.pk) for page in reversed(pages) for e in page.entries], pages


def test_pages_cover_every_entry_once_in_time_order_even_with_ties():
    conversation = ConversationFactory()
    # Four messages and five tasks at one and the same moment, T0 (epoch ms).
    at = datetime_from_ms(T0)
    messages = [
        MessageFactory(conversation=conversation, received_at=at) for _ in range(4)
    ]
    tasks = [
        make_task(
            S.PENDING, kind=INSTRUCTION_DELIVER, conversation_id=conversation.pk, now=T0
        )
        for _ in range(5)
    ]
    later = MessageFactory(conversation=conversation, received_at=timezone.now())
    whole = conversation_story(conversation=conversation, limit=100)
    assert whole.earlier is None and whole.later is None and len(whole.entries) == 10
    expected = [(e.kind, e.row.pk) for e in whole.entries]
    assert expected[-1] == ("message", later.pk)
    keys = [(e.cursor.at_us, e.cursor.rank) for e in whole.entries]
    assert keys == sorted(keys)
    for limit in (1, 2, 3, 4):
        walked, pages = _all_keys(conversation, limit)
        assert walked == expected, limit
        assert all(len(page.entries) <= limit for page in pages)
    # Forward from the first entry, after each page's last: the same entries again.
    first = whole.entries[0].cursor
    story = conversation_story(
        conversation=conversation,
        bound=Bound(first, older=False, inclusive=True),
        limit=3,
    )
    forward = [(e.kind, e.row.pk) for e in story.entries]
    while story.later is not None:
        story = conversation_story(
            conversation=conversation, bound=Bound(story.later, older=False), limit=3
        )
        forward += [(e.kind, e.row.pk) for e in story.entries]
    assert forward == expected
    assert {m.pk for m in messages} <= {
        pk for kind, pk in expected if kind == "message"
    }
    assert {t.pk for t in tasks} <= {pk for kind, pk in expected if kind == "task"}


def test_a_long_conversation_shows_its_latest_entries_and_links_to_earlier_ones(
    admin_client, monkeypatch
):
    monkeypatch.setattr("console.story.reader.PAGE_ENTRIES", 3)
    monkeypatch.setattr(
        "console.admin.story.conversation_story.__kwdefaults__",
        {"bound": None, "limit": 3},
    )
    conversation = ConversationFactory()
    base = timezone.now() - dt.timedelta(hours=1)
    messages = [
        MessageFactory(
            conversation=conversation,
            received_at=base + dt.timedelta(seconds=n),
            text=f"message number {n}",
        )
        for n in range(5)
    ]
    page = page_of(admin_client, conversation)
    assert [int(n) for n in re.findall(r"message number (\d)", page)] == [2, 3, 4]
    earlier = re.search(r'href="([^"]+)" class="story-earlier"', page)[1]
    page = admin_client.get(html.unescape(earlier)).content.decode()
    assert [int(n) for n in re.findall(r"message number (\d)", page)] == [0, 1]
    assert 'class="story-earlier"' not in page and 'class="story-latest"' in page
    # A message's link opens the story at that message.
    page = page_of(admin_client, conversation, message=messages[1].pk)
    assert [int(n) for n in re.findall(r"message number (\d)", page)] == [1, 2, 3]


def test_the_query_count_does_not_grow_with_the_entries(
    admin_client, workspace, django_assert_max_num_queries
):
    # One of each entry kind first: each kind costs its own few queries, once.
    first = ingest(TEXT)
    ingest("From the desktop.", message_id="desktop")  # through another client of its owner: a move
    run(block_tasks(first)["echo"], result={"ok": 1})
    conversation = first.conversation
    make_task(S.PENDING, kind=INSTRUCTION_DELIVER, conversation_id=conversation.pk)
    someone = make_staff("someone", password=None)
    LogEntry.objects.log_actions(
        user_id=someone.pk,
        queryset=[conversation],
        action_flag=2,
        change_message="Paused",
    )
    page_of(admin_client, conversation)  # warm up the session and content types
    with django_assert_max_num_queries(40) as few:
        page_of(admin_client, conversation)
    for n in range(6):
        message = ingest(TEXT.replace("Done.", f"Done {n}."), message_id=f"more-{n}")
        run(block_tasks(message)["echo"], result={"n": n})
        run(block_tasks(message)["files.read"], error="gone")
        make_task(S.PENDING, kind=INSTRUCTION_DELIVER, conversation_id=conversation.pk)
        LogEntry.objects.log_actions(
            user_id=someone.pk,
            queryset=[conversation],
            action_flag=2,
            change_message="Resumed",
        )
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = page_of(admin_client, conversation)
    assert page.count('class="story-block held"') == 7


def test_the_selector_reads_a_fixed_number_of_queries(
    workspace, django_assert_max_num_queries
):
    message = ingest(TEXT)
    with django_assert_max_num_queries(20) as few:
        conversation_story(conversation=message.conversation)
    for n in range(5):
        ingest(TEXT, message_id=f"again-{n}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        story = conversation_story(conversation=message.conversation)
    assert story.held == 6


def test_cursors_read_back_what_they_wrote():
    cursor = Cursor(1_700_000_000_123_456, 1, "abc.def")
    assert Cursor.parse(str(cursor)) == cursor


# --- deciding from the story -----------------------------------------------------------------


def test_approving_from_the_story_runs_the_operator_service_and_logs_it(
    admin_client, admin_user, held
):
    shell = block_tasks(held)["shell.run"]
    response = admin_client.post(
        f"{story_url(held.conversation)}decide/",
        {
            "task_id": shell.pk,
            "decision": "approve",
            "next": story_url(held.conversation),
        },
    )
    assert response.status_code == 302
    assert (
        response["Location"]
        == f"{story_url(held.conversation)}#block-{shell.instruction_id}"
    )
    task = AutomationTask.objects.get(pk=shell.pk)
    assert task.status == S.PENDING
    assert task.events.order_by("at", "pk").last().actor == admin_user.username
    log = LogEntry.objects.get(object_id=shell.pk)
    assert (log.user, log.change_message) == (
        admin_user,
        "Approved from the conversation's story",
    )
    page = admin_client.get(response["Location"]).content.decode()
    assert f"Approved block 4 (shell.run) of message {held.pk}." in page
    assert (
        f"{admin_user.username}</strong> approved" in page
    )  # the operator's action, in the story
    assert "1 instruction queued" in section(page, "story-now")


def test_rejecting_from_the_story_completes_the_message(admin_client, admin_user, held):
    shell = block_tasks(held)["shell.run"]
    admin_client.post(
        f"{story_url(held.conversation)}decide/",
        {
            "task_id": shell.pk,
            "decision": "reject",
            "reason": "not now",
        },
    )
    task = AutomationTask.objects.get(pk=shell.pk)
    assert (task.status, task.last_error) == (
        S.FAILED,
        f"rejected by {admin_user.username}: not now",
    )
    assert AutomationTask.objects.filter(
        kind=INSTRUCTION_DELIVER, message=held
    ).exists()
    # The story tells the rejection as a decision, not as a fault.
    page = admin_client.get(story_url(held.conversation)).content.decode()
    assert "rejected by an operator: it never ran" in page


def test_a_decision_twice_is_reported_not_repeated(admin_client, held):
    shell = block_tasks(held)["shell.run"]
    url = f"{story_url(held.conversation)}decide/"
    admin_client.post(url, {"task_id": shell.pk, "decision": "approve"})
    response = admin_client.post(
        url, {"task_id": shell.pk, "decision": "reject"}, follow=True
    )
    assert AutomationTask.objects.get(pk=shell.pk).status == S.PENDING
    assert (
        "Nothing done: cannot reject a task that is pending."
        in response.content.decode()
    )


def test_deciding_needs_the_permission_the_approve_action_needs(client, held):
    shell = block_tasks(held)["shell.run"]
    viewer = make_staff(
        "viewer",
        "conversations.view_conversation",
        "automation.view_automationtask",
        password=None,
    )
    client.force_login(viewer)
    page = page_of(client, held.conversation)
    assert (
        'name="decision"' not in page and "needs the permission to change tasks" in page
    )
    url = f"{story_url(held.conversation)}decide/"
    assert (
        client.post(url, {"task_id": shell.pk, "decision": "approve"}).status_code
        == 403
    )
    assert AutomationTask.objects.get(pk=shell.pk).status == S.BLOCKED
    operator = make_staff(
        "operator",
        "conversations.view_conversation",
        "automation.view_automationtask",
        "automation.change_automationtask",
        password=None,
    )
    client.force_login(operator)
    assert client.get(url).status_code == 405
    # shell.run runs code: approving it needs automation.approve_code as well
    # (tests/console/test_admin_approve_code.py); rejecting it does not.
    assert (
        client.post(url, {"task_id": shell.pk, "decision": "reject"}).status_code
        == 302
    )
    assert AutomationTask.objects.get(pk=shell.pk).status == S.FAILED


def test_deciding_refuses_a_task_of_another_conversation_or_an_unknown_decision(
    admin_client, held
):
    shell = block_tasks(held)["shell.run"]
    other = ConversationFactory()
    assert (
        admin_client.post(
            f"{story_url(other)}decide/", {"task_id": shell.pk, "decision": "approve"}
        ).status_code
        == 400
    )
    assert (
        admin_client.post(
            f"{story_url(held.conversation)}decide/",
            {"task_id": shell.pk, "decision": "delete"},
        ).status_code
        == 400
    )
    assert AutomationTask.objects.get(pk=shell.pk).status == S.BLOCKED


def test_deciding_never_redirects_off_the_story(admin_client, held):
    shell = block_tasks(held)["shell.run"]
    response = admin_client.post(
        f"{story_url(held.conversation)}decide/",
        {
            "task_id": shell.pk,
            "decision": "approve",
            "next": "https://evil.example/",
        },
    )
    assert response["Location"].startswith(story_url(held.conversation))


# --- the approve action: the arguments in view first -------------------------------------------


def test_the_approve_action_shows_each_call_with_its_argv_and_folder_before_approving(
    admin_client, held, workspace
):
    shell = block_tasks(held)["shell.run"]
    succeeded = block_tasks(held)["echo"]
    response = admin_client.post(
        TASKS,
        {
            "action": "approve",
            ACTION_CHECKBOX_NAME: [shell.pk, succeeded.pk],
            "index": 0,
        },
    )
    page = response.content.decode()
    assert response.status_code == 200 and "Approve these calls?" in page
    assert (
        AutomationTask.objects.get(pk=shell.pk).status == S.BLOCKED
    )  # nothing approved yet
    assert (
        "<code>shell.run</code>" in page and "[&quot;ls&quot;, &quot;-la&quot;]" in page
    )
    assert f"<pre>{workspace / 'src'}</pre>" in page and "<pre>30 s</pre>" in page
    assert "Not blocked (succeeded): skipped." in page
    ids = re.findall(rf'name="{ACTION_CHECKBOX_NAME}" value="(\w+)"', page)
    assert sorted(ids) == sorted([shell.pk, succeeded.pk])
    response = admin_client.post(
        TASKS,
        {"action": "approve", ACTION_CHECKBOX_NAME: ids, "post": "yes"},
        follow=True,
    )
    notes = [str(m) for m in response.context["messages"]]
    assert notes[0] == f"Approved 1 task(s): {shell.pk}"
    assert AutomationTask.objects.get(pk=shell.pk).status == S.PENDING


def test_approving_from_a_tasks_own_page_goes_through_the_same_confirmation(
    admin_client, held, workspace
):
    shell = block_tasks(held)["shell.run"]
    page = admin_client.post(
        f"{TASKS}{shell.pk}/change/",
        {"CHANGE_FORM-action": "approve", ACTION_CHECKBOX_NAME: [shell.pk]},
    ).content.decode()
    assert "Approve these calls?" in page and f"<pre>{workspace / 'src'}</pre>" in page
    assert f'<form method="post" action="{TASKS}">' in page
    assert AutomationTask.objects.get(pk=shell.pk).status == S.BLOCKED


def test_the_confirmation_lists_at_most_its_limit_and_approves_only_those(
    admin_client, monkeypatch
):
    monkeypatch.setattr("console.approval.APPROVAL_SHOWN", 2)
    tasks = [make_task(S.BLOCKED) for _ in range(3)]
    page = admin_client.post(
        TASKS,
        {"action": "approve", ACTION_CHECKBOX_NAME: [t.pk for t in tasks], "index": 0},
    ).content.decode()
    assert "only the first 2" in page
    ids = re.findall(rf'name="{ACTION_CHECKBOX_NAME}" value="(\w+)"', page)
    assert ids == [tasks[0].pk, tasks[1].pk]


def test_a_call_the_run_would_refuse_says_so(admin_client, workspace):
    message = ingest('```baa\nshell.run\n{"argv": ["id"], "cwd": "../.."}\n```')
    shell = block_tasks(message)["shell.run"]
    page = admin_client.get(f"{TASKS}{shell.pk}/change/").content.decode()
    assert "the run would refuse it:" in page and "leads outside the workspace" in page


def test_the_task_page_shows_the_call_it_runs(admin_client, held, workspace):
    shell = block_tasks(held)["shell.run"]
    page = admin_client.get(f"{TASKS}{shell.pk}/change/").content.decode()
    assert "the call it runs" in page.lower()
    assert (
        "[&quot;ls&quot;, &quot;-la&quot;]" in page
        and f"<pre>{workspace / 'src'}</pre>" in page
    )


def test_files_write_shows_the_real_file_it_writes(admin_client, workspace):
    message = ingest(
        '```baa\nfiles.write\n{"path": "notes/plan.md", "content": "hi"}\n```'
    )
    page = admin_client.get(
        f"{TASKS}{block_tasks(message)['files.write'].pk}/change/"
    ).content.decode()
    assert (
        f"<pre>{workspace / 'notes' / 'plan.md'}</pre>" in page
        and "<pre>2</pre>" in page
    )


# --- links to the story ------------------------------------------------------------------------


def test_the_story_is_linked_from_conversations_messages_tasks_and_the_overview(
    admin_client, held
):
    conversation = held.conversation
    url = story_url(conversation)
    shell = block_tasks(held)["shell.run"]
    failed = block_tasks(held)["files.read"]
    for page_url, link in [
        (CONVERSATIONS, url),
        (f"{CONVERSATIONS}{conversation.pk}/change/", url),
        ("/admin/conversations/message/", f"{url}?message={held.pk}"),
        (f"/admin/conversations/message/{held.pk}/change/", f"{url}?message={held.pk}"),
        (TASKS, f"{url}?task={shell.pk}"),
        (f"{TASKS}{shell.pk}/change/", f"{url}?task={shell.pk}"),
        ("/admin/overview/", f"{url}?task={shell.pk}"),
        ("/admin/overview/", f"{url}?task={failed.pk}"),
    ]:
        assert f'href="{link}"' in admin_client.get(page_url).content.decode(), page_url
    # A task's link opens the story at its message.
    page = page_of(admin_client, conversation, task=shell.pk)
    assert f'id="message-{held.pk}"' in page


def test_the_changing_part_is_marked_for_the_live_refresh(admin_client, held):
    page = page_of(admin_client, held.conversation)
    live = page.index('<div id="story-live" data-live data-live-interval="5">')
    assert (
        page.index('class="story-links"')
        < page.index("<p data-live-control></p>")
        < live
        < page.index('id="story-now"')
        < page.index(f'id="message-{held.pk}"')
    )
    assert page.count("data-live ") == 1
    assert '/static/console/live.js"' in page.split('id="content-main"')[0]
    # The assistant's text is never a script of the page's.
    assert "<script" not in page.split('id="content-main"')[1]


def test_the_conversation_list_stays_at_a_fixed_number_of_queries(
    admin_client, django_assert_max_num_queries
):
    ConversationFactory()
    admin_client.get(CONVERSATIONS)
    with django_assert_max_num_queries(20) as few:
        admin_client.get(CONVERSATIONS)
    for _ in range(5):
        ConversationFactory()
    with django_assert_max_num_queries(len(few.captured_queries)):
        admin_client.get(CONVERSATIONS)
    assert Conversation.objects.count() == 6


def test_a_task_that_succeeded_after_a_failure_shows_that_error_as_a_previous_one(admin_client):
    message = ingest('```baa\necho\n{"n": 1}\n```')
    run(block_tasks(message)["echo"], result={"n": 1})
    delivery = AutomationTask.objects.get(kind=INSTRUCTION_DELIVER, message=message)
    task_lease(delivery.pk, lease_owner="d1", lease_until=NOW + 60_000, now=NOW)
    tr.task_start(delivery.pk, lease=lease_of(delivery.pk), lease_until=NOW + 60_000, now=NOW)
    tr.task_retry_later(delivery.pk, lease=lease_of(delivery.pk), error="claude answered HTTP 502", retry_at=NOW,
                        backoff_ms=0, jitter_ms=0, now=NOW)
    task_lease(delivery.pk, lease_owner="d1", lease_until=NOW + 60_000, now=NOW + 1)
    tr.task_start(delivery.pk, lease=lease_of(delivery.pk), lease_until=NOW + 60_000, now=NOW + 1)
    tr.task_succeed(delivery.pk, lease=lease_of(delivery.pk), result={"method": "http", "status": 200}, now=NOW + 2)

    entry = section(page_of(admin_client, message.conversation), f"task-{delivery.pk}")
    assert "succeeded" in entry and "claude answered HTTP 502" in entry
    assert "previous error (an earlier attempt; it succeeded since)" in entry
    assert "last error" not in entry


# --- pausing and resuming from the story ---------------------------------------------------------


def pause_url(conversation):
    return f"{story_url(conversation)}pause/"


def test_the_story_offers_resume_on_a_paused_conversation_and_pause_on_a_running_one(admin_client):
    conversation = ConversationFactory(paused=True)
    form = section(page_of(admin_client, conversation), "story-pause")
    assert f'action="{pause_url(conversation)}"' in form and 'value="0"' in form and "Resume…" in form
    Conversation.objects.filter(pk=conversation.pk).update(paused=False)
    form = section(page_of(admin_client, conversation), "story-pause")
    assert 'value="1"' in form and "Pause…" in form and "Resume" not in form


def test_resuming_from_the_story_asks_first_then_runs_the_lists_action(admin_client, admin_user):
    conversation = ConversationFactory(paused=True, title="Release")
    make_task(S.PENDING, conversation_id=conversation.pk)

    asked = admin_client.get(pause_url(conversation), {"is_paused": "0"})
    assert asked.status_code == 200
    page = asked.content.decode()
    assert "Resume Release?" in page and "its 1 open task" in page and 'value="Yes, resume it"' in page
    assert Conversation.objects.get(pk=conversation.pk).paused  # asking changed nothing

    response = admin_client.post(pause_url(conversation), {"is_paused": "0"}, follow=True)
    assert response.redirect_chain == [(story_url(conversation), 302)]
    assert not Conversation.objects.get(pk=conversation.pk).paused
    assert [str(m) for m in response.context["messages"]] == ["Resumed: 1 conversation(s)."]
    # The same admin log entry as the list's action, so the story shows who resumed it.
    log = LogEntry.objects.get(object_id=str(conversation.pk))
    assert (log.user, log.change_message) == (admin_user, "Resumed")
    assert section(response.content.decode(), f"log-{log.pk}").count("Resumed") == 1


def test_pausing_from_the_story_twice_is_reported_not_repeated(admin_client):
    conversation = ConversationFactory(paused=False)
    admin_client.post(pause_url(conversation), {"is_paused": "1"}, follow=True)
    assert Conversation.objects.get(pk=conversation.pk).paused
    response = admin_client.post(pause_url(conversation), {"is_paused": "1"}, follow=True)
    assert [str(m) for m in response.context["messages"]] == ["Skipped 1 conversation(s): already paused."]
    assert LogEntry.objects.filter(object_id=str(conversation.pk), change_message="Paused").count() == 1


def test_pausing_from_the_story_needs_the_permission_the_lists_action_needs(client):
    conversation = ConversationFactory(paused=True)
    client.force_login(make_staff(
        "viewer", "conversations.view_conversation", "automation.view_automationtask", password=None))
    assert 'id="story-pause"' not in page_of(client, conversation)
    assert client.get(pause_url(conversation), {"is_paused": "0"}).status_code == 403
    assert client.post(pause_url(conversation), {"is_paused": "0"}).status_code == 403
    assert Conversation.objects.get(pk=conversation.pk).paused
    client.force_login(make_staff(
        "operator", "conversations.view_conversation", "conversations.change_conversation",
        "automation.view_automationtask", password=None))
    assert client.post(pause_url(conversation), {"is_paused": "0"}).status_code == 302
    assert not Conversation.objects.get(pk=conversation.pk).paused


def in_the_admins_look(page):
    """Whether ``page`` is one of the admin's own: its stylesheets, header and breadcrumbs."""
    return all(part in page for part in (
        "admin/css/base.css", "console/console.css", '<div id="site-name">', '<ol class="breadcrumbs">'))


@pytest.mark.parametrize("paused, verb, value", [(True, "Resume", "0"), (False, "Pause", "1")])
def test_the_pause_page_asked_without_its_choice_asks_for_what_applies_now(admin_client, paused, verb, value):
    conversation = ConversationFactory(paused=paused, title="Night build")
    for query in ({}, {"is_paused": "maybe"}):
        response = admin_client.get(pause_url(conversation), query)
        page = response.content.decode()
        assert response.status_code == 200 and in_the_admins_look(page)
        assert f"{verb} Night build?" in page and f'name="is_paused" value="{value}"' in page
        assert f'value="Yes, {verb.lower()} it"' in page and 'id="story-pause-unasked"' not in page
    assert Conversation.objects.get(pk=conversation.pk).paused == paused


def test_a_post_without_its_choice_does_nothing_and_asks_again_in_the_admins_look(admin_client):
    conversation = ConversationFactory(paused=True, title="Night build")
    for data in ({}, {"is_paused": "maybe"}):
        response = admin_client.post(pause_url(conversation), data)
        page = response.content.decode()
        assert response.status_code == 400 and in_the_admins_look(page)
        assert "Nothing was done: the request did not say whether to pause or resume" in page
        assert "Resume Night build?" in page and 'name="is_paused" value="0"' in page
    assert Conversation.objects.get(pk=conversation.pk).paused
    assert not LogEntry.objects.filter(object_id=str(conversation.pk)).exists()


def test_other_methods_on_the_pause_page_get_a_405_in_the_admins_look(admin_client):
    conversation = ConversationFactory(paused=True)
    for method in (admin_client.put, admin_client.delete, admin_client.patch):
        response = method(pause_url(conversation), "is_paused=0", content_type="application/x-www-form-urlencoded")
        page = response.content.decode()
        assert response.status_code == 405 and response["Allow"] == "GET, HEAD, POST"
        assert in_the_admins_look(page) and "does not take a" in page and "it takes GET, HEAD, POST" in page
    assert Conversation.objects.get(pk=conversation.pk).paused


def test_the_pause_page_still_needs_a_staff_login(client):
    conversation = ConversationFactory(paused=True)
    for method in (client.get, client.post, client.put):
        response = method(pause_url(conversation))
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_a_move_to_another_client_of_the_owner_is_an_entry_naming_both_clients(admin_client):
    first = ingest("From the laptop.")
    ingest("From the desktop.", message_id="m2", client_id="desktop")
    move = ConversationMove.objects.get()
    page = page_of(admin_client, first.conversation)
    entry = section(page, f"move-{move.pk}")
    assert "Moved from plugin client <strong>laptop-m1</strong> to <strong>desktop-m2</strong>" in entry


# --- a message with more blocks than a page shows ------------------------------------------------


def test_a_message_with_more_blocks_than_shown_folds_the_rest_behind_a_count_and_a_link(admin_client):
    # Ingest keeps at most 33 blocks a message; older rows or a script may hold more.
    message = MessageFactory(text="sixty blocks")
    for index in range(1, 61):
        InstructionFactory(message=message, block_index=index, tool="echo", params={"n": index},
                           status=Instruction.Status.REJECTED, error=f"error of block {index}")
    page = page_of(admin_client, message.conversation)
    entry = section(page, f"message-{message.pk}")
    shown = re.findall(r'<div class="story-block [a-z]+" id="block-(\d+)"', entry)
    assert len(shown) == 50
    assert "error of block 50" in entry and "error of block 51" not in entry
    assert "— 60 blocks" in entry
    assert "<summary>10 more blocks</summary>" in entry
    link = f'/admin/ingest/instruction/?message__id__exact={message.pk}">all 60 blocks of message {message.pk}</a>'
    assert link in entry
    # The link leads to them all.
    listed = admin_client.get(f"/admin/ingest/instruction/?message__id__exact={message.pk}")
    assert listed.status_code == 200 and "60 instructions" in listed.content.decode()


def test_a_message_within_the_shown_blocks_has_no_fold(admin_client):
    message = MessageFactory(text="three blocks")
    for index in range(1, 4):
        InstructionFactory(message=message, block_index=index, status=Instruction.Status.REJECTED)
    entry = section(page_of(admin_client, message.conversation), f"message-{message.pk}")
    assert "— 3 blocks" in entry and "more block" not in entry
