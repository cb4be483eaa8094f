"""Why a task waits, in the console: the task's page, the task list and the story (``console.task_waits``).

Each situation made as the product makes it (ingest, the admin's pauses,
the engine's transitions) and read through the admin test client.
"""

import html

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.models import AutomationTask, TaskStatus
from automation.services import operator
from automation.services.dispatcher_state import kind_pause_set
from core.clock import now_ms
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.services.messages import message_ingest
from tests.factories import PluginClientFactory, make_task

pytestmark = pytest.mark.django_db

S = TaskStatus
TASKS = "/admin/automation/automationtask/"
SHELL = '```baa\nshell.run\n{"argv": ["ls"]}\n```'
ECHO = '```baa\necho\n{"text": "hi"}\n```'
BROKEN = "```baa\nno.such.tool\n{}\n```"


def ingest(text, *, message_id="m1", conversation_id="c1", client_id="laptop"):
    client = PluginClientFactory._meta.model.objects.filter(client_id=client_id).first() or PluginClientFactory(
        client_id=client_id)
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": conversation_id,
             "message_id": message_id, "text": text}
    return message_ingest(message=parse_final_message(frame), client=client)


def block_task(index, *, message_id="m1"):
    return AutomationTask.objects.get(
        kind=INSTRUCTION_EXECUTE, instruction__block_index=index, message__remote_message_id=message_id)


def page_of(client, task):
    return html.unescape(client.get(f"{TASKS}{task.pk}/change/").content.decode())


def behind_approval():
    ingest(f"{SHELL}\n{ECHO}")
    return block_task(2), "It waits behind instruction {held}, which waits for an operator's approval"


def conversation_paused():
    ingest(ECHO)
    task = block_task(1)
    operator.conversations_pause(conversation_ids=[task.conversation_id], is_paused=True, actor="admin")
    return task, "Its conversation is paused: its tasks wait until it is resumed."


def kind_paused():
    ingest(ECHO)
    kind_pause_set(kind=INSTRUCTION_EXECUTE, is_paused=True, actor="admin")
    return block_task(1), f"Tasks of its kind, {INSTRUCTION_EXECUTE}, are paused from the overview."


def no_plugin():
    ingest(BROKEN)  # every block rejected: the message's delivery at once, to the client that sent it
    return AutomationTask.objects.get(kind=INSTRUCTION_DELIVER), "Plugin client laptop is not connected"


def backoff():
    return make_task(S.RETRY_WAIT, kind="test.local", now=now_ms()), "its retry waits out its backoff."


SITUATIONS = {
    "behind_approval": behind_approval, "conversation_paused": conversation_paused, "kind_paused": kind_paused,
    "no_plugin": no_plugin, "backoff": backoff,
}


@pytest.mark.parametrize("code", SITUATIONS)
def test_the_task_page_and_the_list_say_why_it_waits(admin_client, code):
    task, sentence = SITUATIONS[code]()
    held = AutomationTask.objects.filter(status=S.BLOCKED).first()
    sentence = sentence.format(held=held.pk[:8] if held else "")
    page = page_of(admin_client, task)
    assert "Waiting for" in page and sentence in page
    assert f'data-wait="{code}"' in page

    listed = html.unescape(admin_client.get(TASKS).content.decode())
    label = code.replace("_", " ")
    assert f'<span class="task-wait-code" title="' in listed and f'">{label}</span>' in listed
    assert sentence in listed  # the sentence, on hover


def test_a_block_behind_a_held_one_links_to_where_that_one_is_approved(admin_client):
    task, _ = behind_approval()
    held = block_task(1)
    page = page_of(admin_client, task)
    story = f"/admin/conversations/conversation/{held.conversation_id}/story/?task={held.pk}#block-{held.instruction_id}"
    assert f'<a href="{story}" class="task-wait-ahead">approve or reject it in the story</a>' in page


def test_a_task_due_and_free_waits_for_nothing_and_a_running_one_shows_no_reason(admin_client):
    due = make_task(S.PENDING, kind="test.local", now=now_ms())
    assert "nothing: it is due, and the dispatcher's next claim takes it" in page_of(admin_client, due)
    running = make_task(S.RUNNING, kind="test.local", now=now_ms())
    assert 'data-wait="' not in page_of(admin_client, running)


def test_the_list_reads_why_its_tasks_wait_in_one_statement_however_many(admin_client):
    ingest(f"{SHELL}\n{ECHO}\n{ECHO}")
    admin_client.get(TASKS)  # warm up the session and content types
    with CaptureQueriesContext(connection) as few:
        admin_client.get(TASKS)
    for n in range(20):
        ingest(f"{SHELL}\n{ECHO}", message_id=f"more-{n}", conversation_id=f"c-{n % 4}")
    with CaptureQueriesContext(connection) as many:
        page = admin_client.get(TASKS).content.decode()
    assert len(many) == len(few)
    # Every echo block waits behind its conversation's first shell block; every shell block for its own approval.
    assert page.count(">behind approval</span>") == 2 + 20
    assert page.count(">approval</span>") == 1 + 20
    waits = [query["sql"] for query in many.captured_queries if "automation_kindpause" in query["sql"]]
    assert len(waits) == 1


def test_the_story_says_why_a_block_and_a_delivery_wait(admin_client):
    ingest(f"{SHELL}\n{ECHO}")
    held = block_task(1)
    ingest(BROKEN, message_id="m2", conversation_id="c2")
    delivery = AutomationTask.objects.get(kind=INSTRUCTION_DELIVER)

    page = html.unescape(admin_client.get(
        f"/admin/conversations/conversation/{held.conversation_id}/story/").content.decode())
    assert page.count('data-wait="') == 1  # the held block's own approval is its form, not a line
    assert f"It waits behind instruction {held.pk[:8]}, which waits for an operator's approval" in page
    assert f"?task={held.pk}#block-{held.instruction_id}" in page

    page = html.unescape(admin_client.get(
        f"/admin/conversations/conversation/{delivery.conversation_id}/story/").content.decode())
    assert 'data-wait="no_plugin"' in page and "Plugin client laptop is not connected" in page
