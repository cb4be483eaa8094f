import datetime as dt
import logging
import re
from unittest import mock

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from automation.models import AutomationTask, TaskStatus
from automation.services.operator import conversations_pause
from conversations.models import Conversation, Message
from conversations.services import conversations_renewal_set
from ingest.models import Instruction
from pipelines.renewal import RENEWAL_DELIVER
from tests.factories import (
    ConversationFactory,
    ConversationLinkFactory,
    InstructionFactory,
    MessageFactory,
    create_or_skip,
    make_staff,
    make_task,
)

pytestmark = pytest.mark.django_db

CONVERSATIONS = "/admin/conversations/conversation/"
MESSAGES = "/admin/conversations/message/"


def run_action(client, action, objects, url=CONVERSATIONS):
    response = client.post(
        url, {"action": action, ACTION_CHECKBOX_NAME: [o.pk for o in objects], "index": 0}, follow=True
    )
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


def fresh(conversation):
    return Conversation.objects.get(pk=conversation.pk)


def log_messages(conversation):
    return list(
        LogEntry.objects.filter(object_id=str(conversation.pk), content_type__model="conversation")
        .order_by("action_time", "pk")
        .values_list("user__username", "change_message")
    )


# --- the conversation list -------------------------------------------------------------------


def test_the_list_shows_the_conversation_and_its_open_task_count(admin_client):
    conversation = ConversationFactory(title="Trip planning", remote_id="r-123", platform="gemini")
    for state in (TaskStatus.PENDING, TaskStatus.BLOCKED, TaskStatus.SUCCEEDED, TaskStatus.FAILED):
        make_task(state, conversation_id=conversation.pk)
    page = admin_client.get(CONVERSATIONS).content.decode()
    assert "Trip planning" in page and "r-123" in page and "Gemini" in page
    assert f'?conversation__id__exact={conversation.pk}">2</a>' in page  # pending and blocked are open


def test_the_list_needs_a_fixed_number_of_queries(admin_client, django_assert_max_num_queries):
    def add(n):
        for _ in range(n):
            conversation = ConversationFactory()
            make_task(conversation_id=conversation.pk)

    add(2)
    admin_client.get(CONVERSATIONS)
    with django_assert_max_num_queries(15) as few:
        admin_client.get(CONVERSATIONS)
    add(10)
    with django_assert_max_num_queries(len(few.captured_queries)):
        admin_client.get(CONVERSATIONS)


@pytest.mark.parametrize(
    "query,expected",
    [
        ("platform__exact=chatgpt", {"chatgpt"}),
        ("paused__exact=1", {"paused"}),
        ("renewal_enabled__exact=1", {"renewing"}),
        ("q=remote-xyz", {"chatgpt"}),
        ("q=Holiday", {"paused"}),
    ],
)
def test_filters_and_search(admin_client, query, expected):
    rows = {
        "chatgpt": ConversationFactory(platform="chatgpt", remote_id="remote-xyz", title="Alpha"),
        "paused": ConversationFactory(paused=True, title="Holiday ideas"),
        "renewing": ConversationFactory(renewal_enabled=True, title="Gamma"),
    }
    page = admin_client.get(f"{CONVERSATIONS}?{query}").content.decode()
    shown = {name for name, c in rows.items() if f"/conversation/{c.pk}/change/" in page}
    assert shown == expected


# --- actions ---------------------------------------------------------------------------------


def test_pause_pauses_only_running_conversations_and_logs_the_operator(admin_client, admin_user, caplog):
    running, already = ConversationFactory(), ConversationFactory(paused=True)
    with caplog.at_level(logging.INFO, logger="conversations.services"):
        notes = run_action(admin_client, "pause", [running, already])
    assert fresh(running).paused and fresh(already).paused
    assert notes == ["Paused: 1 conversation(s).", "Skipped 1 conversation(s): already paused."]
    assert log_messages(running) == [(admin_user.username, "Paused")]
    assert log_messages(already) == []
    assert f"action=conversation_pause conversation_ids=[{running.pk}] actor={admin_user.username}" in caplog.text


def test_resume_wakes_the_dispatcher_once_it_commits(admin_client, admin_user, django_capture_on_commit_callbacks):
    paused, running = ConversationFactory(paused=True), ConversationFactory()
    with (
        mock.patch("automation.wake.dispatcher_wake") as wake,
        django_capture_on_commit_callbacks(execute=True),
    ):
        notes = run_action(admin_client, "resume", [paused, running])
    assert not fresh(paused).paused
    wake.assert_called_once_with()
    assert notes == ["Resumed: 1 conversation(s).", "Skipped 1 conversation(s): not paused."]
    assert log_messages(paused) == [(admin_user.username, "Resumed")]


def test_pausing_does_not_wake_the_dispatcher_and_a_no_op_resume_neither(django_capture_on_commit_callbacks):
    conversation = ConversationFactory()
    with (
        mock.patch("automation.wake.dispatcher_wake") as wake,
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert conversations_pause(conversation_ids=[conversation.pk], is_paused=True, actor="a") == 1
        assert conversations_pause(conversation_ids=[conversation.pk], is_paused=True, actor="a") == 0
        assert conversations_pause(conversation_ids=[conversation.pk], is_paused=False, actor="a") == 1
        assert conversations_pause(conversation_ids=[conversation.pk], is_paused=False, actor="a") == 0
    assert wake.call_count == 1


def test_renewal_on_and_off(admin_client, admin_user, caplog):
    off, on = ConversationFactory(), ConversationFactory(renewal_enabled=True)
    with caplog.at_level(logging.INFO, logger="conversations.services"):
        notes = run_action(admin_client, "enable_renewal", [off, on])
    assert fresh(off).renewal_enabled and fresh(on).renewal_enabled
    assert notes == ["Enabled renewal: 1 conversation(s).", "Skipped 1 conversation(s): renewal already on."]
    assert f"action=conversation_renewal_enable conversation_ids=[{off.pk}] actor=admin" in caplog.text

    notes = run_action(admin_client, "disable_renewal", [off])
    assert not fresh(off).renewal_enabled and fresh(on).renewal_enabled
    assert notes == ["Disabled renewal: 1 conversation(s)."]
    assert log_messages(off) == [(admin_user.username, "Enabled renewal"), (admin_user.username, "Disabled renewal")]
    assert conversations_renewal_set(conversation_ids=[off.pk], is_enabled=False, actor="a") == 0


def test_renew_now_queues_a_renewal_for_routable_conversations_and_skips_the_rest(admin_client, admin_user):
    linked = ConversationLinkFactory(conversation=ConversationFactory(title="Linked")).conversation
    paused = ConversationLinkFactory(conversation=ConversationFactory(title="Resting", paused=True)).conversation
    unlinked = ConversationFactory(title="Nowhere")

    notes = run_action(admin_client, "renew_now", [linked, paused, unlinked])

    task = AutomationTask.objects.get()
    assert (task.kind, task.conversation_id, task.status) == (RENEWAL_DELIVER, linked.pk, TaskStatus.PENDING)
    assert task.events.get().actor == admin_user.username
    assert notes[0].startswith("Queued a renewal for 1 conversation(s): Linked")
    assert f"/admin/automation/automationtask/{task.pk}/change/" in notes[0]
    assert notes[1] == "Skipped 2 conversation(s): Resting: paused; Nowhere: no link"
    assert log_messages(linked) == [(admin_user.username, f"Renew now: queued renewal task {task.pk}")]
    assert log_messages(paused) == log_messages(unlinked) == []


# --- the conversation page -------------------------------------------------------------------


def test_the_page_shows_links_and_the_twenty_newest_messages(admin_client):
    conversation = ConversationFactory()
    link = ConversationLinkFactory(conversation=conversation, page_url="https://claude.ai/chat/xyz")
    start = timezone.now() - dt.timedelta(hours=1)
    for n in range(25):
        MessageFactory(conversation=conversation, text=f"message number {n:02d}",
                       received_at=start + dt.timedelta(minutes=n))
    page = admin_client.get(f"{CONVERSATIONS}{conversation.pk}/change/").content.decode()
    assert link.client.client_id in page and "https://claude.ai/chat/xyz" in page
    shown = re.findall(r"message number (\d\d)", page)
    assert shown == [f"{n:02d}" for n in range(24, 4, -1)]  # newest first, 20 of them


def test_the_conversations_owner_is_shown_and_the_list_filters_by_it(admin_client):
    alices = ConversationFactory(owner="alice", title="Alice's plan")
    ConversationFactory(owner="bob", title="Bob's plan")
    page = admin_client.get(f"{CONVERSATIONS}{alices.pk}/change/").content.decode()
    assert re.search(r'<div class="readonly">alice</div>', page)
    listed = admin_client.get(CONVERSATIONS, {"owner": "alice"}).content.decode()
    assert "Alice&#x27;s plan" in listed and "Bob&#x27;s plan" not in listed


def test_saving_the_renewal_policy_leaves_the_pause_alone(admin_client, admin_user):
    conversation = ConversationFactory(paused=False, renewal_text="Go on.")
    url = f"{CONVERSATIONS}{conversation.pk}/change/"
    admin_client.get(url)
    Conversation.objects.filter(pk=conversation.pk).update(paused=True)  # another operator, meanwhile
    response = admin_client.post(url, {
        "renewal_idle_seconds": 600, "renewal_text": "Keep going, please.", "renewal_daily_cap": 3,
        "links-TOTAL_FORMS": 0, "links-INITIAL_FORMS": 0,
        "messages-TOTAL_FORMS": 0, "messages-INITIAL_FORMS": 0,
        "_save": "Save",
    })
    assert response.status_code == 302, response.content.decode()[:3000]
    saved = fresh(conversation)
    assert (saved.renewal_idle_seconds, saved.renewal_text, saved.renewal_daily_cap) == (600, "Keep going, please.", 3)
    assert saved.paused  # not written back from the form


def test_conversations_cannot_be_added_or_deleted(admin_client):
    conversation = ConversationFactory()
    assert admin_client.get(f"{CONVERSATIONS}add/").status_code == 403
    assert admin_client.get(f"{CONVERSATIONS}{conversation.pk}/delete/").status_code == 403


# --- messages ---------------------------------------------------------------------------------


def test_the_message_page_shows_the_text_its_instructions_and_their_tasks(admin_client):
    message = MessageFactory(text="Reading it now.\n```baa\nfiles.read\n{\"path\": \"a <b>\"}\n```")
    ran = InstructionFactory(message=message, block_index=1, tool="files.read", params={"path": "a <b>"},
                             status=Instruction.Status.SUCCEEDED)
    refused = InstructionFactory(message=message, block_index=2, tool="", target="",
                                 status=Instruction.Status.REJECTED, error="bad header 'Nope!'")
    task = make_task(TaskStatus.SUCCEEDED, instruction_id=ran.pk, message_id=message.pk)

    page = admin_client.get(f"{MESSAGES}{message.pk}/change/").content.decode()

    assert '<pre class="message-text conductor-text">Reading it now.\n```baa\nfiles.read' in page
    assert "<p>files.read</p>" in page
    assert "bad header &#x27;Nope!&#x27;" in page
    assert f'<a href="/admin/automation/automationtask/{task.pk}/change/">{task.task_id}</a> succeeded' in page
    assert "{&quot;ok&quot;: 1}" in page  # the task's result
    assert f"/admin/ingest/instruction/{refused.pk}/change/" in page


def test_an_instruction_is_named_by_its_tool_with_its_target_only_when_that_is_not_conductor(admin_client):
    own = InstructionFactory(tool="files.read")
    InstructionFactory(message=own.message, tool="files.read", target="laptop")
    page = admin_client.get(f"{MESSAGES}{own.message_id}/change/").content.decode()
    assert re.findall(r'<td class="field-call">\s*<p>(.*?)</p>', page) == ["files.read", "laptop::files.read"]


def test_the_message_list_fetches_a_preview_not_the_text_and_counts_without_grouping(
    admin_client, django_assert_max_num_queries
):
    message = MessageFactory(text="word " * 20_000, raw_frame={"text": "word " * 20_000})
    InstructionFactory.create_batch(3, message=message)
    MessageFactory(conversation=message.conversation, text="short")
    admin_client.get(MESSAGES)
    with django_assert_max_num_queries(8) as queries:
        response = admin_client.get(MESSAGES)
    listed = {row.pk: row for row in response.context["cl"].result_list}
    assert {"text", "raw_frame"} <= listed[message.pk].get_deferred_fields()
    page = response.content.decode()
    assert ("word " * 24).strip() + "…" in page and "short" in page
    assert '<td class="field-instruction_count">3</td>' in page
    sql = "\n".join(query["sql"] for query in queries.captured_queries)
    assert '"conversations_message"."raw_frame"' not in sql
    # The text appears only inside the preview's SUBSTR (SUBSTRING on PostgreSQL).
    previews = re.findall(r'SUBSTR(?:ING)?\("conversations_message"\."text", 1, ', sql)
    assert sql.count('"conversations_message"."text"') == len(previews) > 0
    assert 'GROUP BY "conversations_message"' not in sql


def test_the_conversation_list_counts_open_tasks_without_grouping(admin_client, django_assert_max_num_queries):
    conversation = ConversationFactory(renewal_text="Please go on. " * 1000)
    make_task(TaskStatus.PENDING, conversation_id=conversation.pk)
    admin_client.get(CONVERSATIONS)
    with django_assert_max_num_queries(8) as queries:
        response = admin_client.get(CONVERSATIONS)
    assert f'?conversation__id__exact={conversation.pk}">1</a>' in response.content.decode()
    sql = "\n".join(query["sql"] for query in queries.captured_queries)
    assert 'GROUP BY "conversations_conversation"' not in sql and '"renewal_text"' not in sql
    assert sql.count("COUNT(*)") == 1  # the filtered count; no second count of the whole table


def test_the_message_page_shows_the_first_instructions_and_links_to_all(admin_client, monkeypatch):
    monkeypatch.setattr("console.admin.conversations.FirstInstructionsFormSet.limit", 3)
    message = MessageFactory()
    instructions = [InstructionFactory(message=message, block_index=n) for n in range(1, 6)]
    page = admin_client.get(f"{MESSAGES}{message.pk}/change/").content.decode()
    shown = [i for i in instructions if f"/admin/ingest/instruction/{i.pk}/change/" in page]
    assert shown == instructions[:3]
    assert f'5 (<a href="/admin/ingest/instruction/?message__id__exact={message.pk}">' in page
    listed = admin_client.get(f"/admin/ingest/instruction/?message__id__exact={message.pk}").content.decode()
    assert all(f"/admin/ingest/instruction/{i.pk}/change/" in listed for i in instructions)


def test_the_message_list_filters_and_searches(admin_client):
    plugin = MessageFactory(text="alpha words", remote_message_id="m-plugin")
    user_turn = MessageFactory(text="beta words", role=Message.Role.USER, source=Message.Source.CONDUCTOR)
    on_gemini = MessageFactory(text="gamma words", conversation=ConversationFactory(platform="gemini"))

    def shown(query):
        page = admin_client.get(f"{MESSAGES}?{query}").content.decode()
        return {m.text for m in (plugin, user_turn, on_gemini) if m.text in page}

    assert shown("role__exact=user") == {"beta words"}
    assert shown("source__exact=conductor") == {"beta words"}
    assert shown("conversation__platform__exact=gemini") == {"gamma words"}
    assert shown("q=alpha") == {"alpha words"}
    assert shown("q=m-plugin") == {"alpha words"}


def test_the_message_list_and_page_show_and_filter_by_capture(admin_client):
    MessageFactory(text="from the stream", capture=Message.Capture.NETWORK)
    dom = MessageFactory(text="from the page", capture=Message.Capture.DOM)
    MessageFactory(text="not said")

    def shown(query):
        page = admin_client.get(f"{MESSAGES}?{query}").content.decode()
        return {text for text in ("from the stream", "from the page", "not said") if text in page}

    assert shown("capture__exact=network") == {"from the stream"}
    assert shown("capture__exact=dom") == {"from the page"}
    listed = admin_client.get(MESSAGES).content.decode()
    assert '<td class="field-capture">Network</td>' in listed and '<td class="field-capture">DOM</td>' in listed
    page = admin_client.get(f"{MESSAGES}{dom.pk}/change/").content.decode()
    capture_row = page.split('class="form-row field-capture"')[1].split('class="form-row')[0]
    assert '<div class="readonly">DOM</div>' in capture_row


def test_messages_are_read_only(admin_client):
    message = MessageFactory()
    page = admin_client.get(f"{MESSAGES}{message.pk}/change/").content.decode()
    assert 'name="_save"' not in page
    assert admin_client.post(f"{MESSAGES}{message.pk}/change/", {"text": "rewritten"}).status_code == 403
    assert admin_client.get(f"{MESSAGES}add/").status_code == 403


# --- permissions --------------------------------------------------------------------------------


def test_staff_with_view_permission_cannot_pause(client):
    client.force_login(make_staff("viewer", "conversations.view_conversation"))
    conversation = ConversationFactory()
    page = client.get(CONVERSATIONS).content.decode()
    assert conversation.title in page and 'value="pause"' not in page
    client.post(CONVERSATIONS, {"action": "pause", ACTION_CHECKBOX_NAME: [conversation.pk], "index": 0})
    assert not fresh(conversation).paused


def test_staff_with_change_permission_can_pause_and_is_recorded(client):
    client.force_login(make_staff("operator", "conversations.view_conversation", "conversations.change_conversation"))
    conversation = ConversationFactory()
    assert run_action(client, "pause", [conversation]) == ["Paused: 1 conversation(s)."]
    assert fresh(conversation).paused
    assert log_messages(conversation) == [("operator", "Paused")]


def test_staff_without_permissions_cannot_see_conversations_or_messages(client):
    client.force_login(make_staff("stranger", "automation.view_automationtask"))
    conversation = ConversationFactory()
    message = MessageFactory(conversation=conversation)
    assert client.get(CONVERSATIONS).status_code == 403
    assert client.get(f"{CONVERSATIONS}{conversation.pk}/change/").status_code == 403
    assert client.get(MESSAGES).status_code == 403
    assert client.get(f"{MESSAGES}{message.pk}/change/").status_code == 403
    response = client.post(CONVERSATIONS, {"action": "pause", ACTION_CHECKBOX_NAME: [conversation.pk], "index": 0})
    assert response.status_code == 403
    assert not fresh(conversation).paused


def test_staff_who_may_view_messages_see_their_instructions(client):
    client.force_login(make_staff("reader", "conversations.view_message"))
    instruction = InstructionFactory(tool="time.now")
    page = client.get(f"{MESSAGES}{instruction.message_id}/change/").content.decode()
    assert "<p>time.now</p>" in page


# --- stored URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["javascript:alert(document.domain)//", "data:text/html,<script>x</script>"])
def test_a_page_url_with_an_unsafe_scheme_is_shown_as_text_not_as_a_link(admin_client, url):
    conversation = ConversationFactory()
    ConversationLinkFactory(conversation=conversation, page_url=url)
    page = admin_client.get(f"{CONVERSATIONS}{conversation.pk}/change/").content.decode()
    cell = page[page.index('<td class="field-page">'):]
    cell = cell[:cell.index("</td>")]
    assert "<a " not in cell and "href" not in cell
    assert url.split(",")[0] in cell and "<script>" not in cell


def test_a_page_url_with_a_safe_scheme_is_a_link(admin_client):
    conversation = ConversationFactory()
    ConversationLinkFactory(conversation=conversation, page_url="https://claude.ai/chat/xyz")
    page = admin_client.get(f"{CONVERSATIONS}{conversation.pk}/change/").content.decode()
    assert '<a href="https://claude.ai/chat/xyz" rel="noreferrer noopener">' in page


# --- stored text that cannot be encoded ---------------------------------------------------------

LONE = "\ud800"  # a lone surrogate: a valid str, but not encodable as UTF-8


@pytest.mark.parametrize(
    "model_factory,fields",
    [
        (InstructionFactory, {"params": {"path": f"notes{LONE}.md"}}),
        (MessageFactory, {"raw_frame": {"type": "browser.final_message", "text": f"notes{LONE}.md"}}),
        (MessageFactory, {"text": f"notes{LONE}.md"}),
    ],
    ids=["instruction-params", "raw-frame", "text"],
)
def test_a_message_page_shows_a_lone_surrogate_as_a_replacement_character(admin_client, model_factory, fields):
    row = create_or_skip(model_factory, **fields)
    message = row if isinstance(row, Message) else row.message
    response = admin_client.get(f"{MESSAGES}{message.pk}/change/")
    assert response.status_code == 200
    assert "notes\ufffd.md" in response.content.decode()


@pytest.mark.parametrize(
    "model_factory,fields",
    [(ConversationFactory, {"title": f"Plans{LONE}"}), (MessageFactory, {"text": f"Plans{LONE}"})],
    ids=["title", "message-text"],
)
def test_conversation_pages_show_a_lone_surrogate_as_a_replacement_character(admin_client, model_factory, fields):
    row = create_or_skip(model_factory, **fields)
    conversation = row if isinstance(row, Conversation) else row.conversation
    for url in (CONVERSATIONS, f"{CONVERSATIONS}{conversation.pk}/change/", MESSAGES):
        response = admin_client.get(url)
        assert response.status_code == 200
        assert "Plans\ufffd" in response.content.decode()


def _save_delivery_methods(admin_client, conversation, methods):
    return admin_client.post(f"{CONVERSATIONS}{conversation.pk}/change/", {
        "renewal_idle_seconds": conversation.renewal_idle_seconds, "renewal_text": conversation.renewal_text,
        "renewal_daily_cap": conversation.renewal_daily_cap, "delivery_methods": methods,
        "links-TOTAL_FORMS": 0, "links-INITIAL_FORMS": 0,
        "messages-TOTAL_FORMS": 0, "messages-INITIAL_FORMS": 0,
        "_save": "Save",
    })


def test_an_operator_sets_a_conversations_delivery_methods_and_sees_the_order_in_use(admin_client, caplog):
    conversation = ConversationFactory(platform="claude")
    page = admin_client.get(f"{CONVERSATIONS}{conversation.pk}/change/").content.decode()
    assert "http → dom (from the platform&#x27;s setting)" in page
    chatgpt = ConversationFactory(platform="chatgpt")
    page = admin_client.get(f"{CONVERSATIONS}{chatgpt.pk}/change/").content.decode()
    assert "dom (from the platform&#x27;s setting)" in page

    with caplog.at_level(logging.INFO, logger="conversations.services"):
        response = _save_delivery_methods(admin_client, conversation, "dom")
    assert response.status_code == 302, response.content.decode()[:3000]
    assert fresh(conversation).delivery_methods == "dom"
    assert "action=conversation_delivery_methods" in caplog.text and "methods=dom" in caplog.text
    assert "actor=admin" in caplog.text
    page = admin_client.get(f"{CONVERSATIONS}{conversation.pk}/change/").content.decode()
    assert "dom (from this conversation)" in page

    assert _save_delivery_methods(admin_client, conversation, "").status_code == 302
    assert fresh(conversation).delivery_methods == ""


@pytest.mark.parametrize("methods,error", [
    ("pigeon", "unknown delivery method &#x27;pigeon&#x27;; known: http, dom"),
    ("dom,dom", "a delivery method is named twice"),
])
def test_a_wrong_delivery_method_is_refused_with_what_is_wrong(admin_client, methods, error):
    conversation = ConversationFactory(delivery_methods="http")
    response = _save_delivery_methods(admin_client, conversation, methods)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert fresh(conversation).delivery_methods == "http"
