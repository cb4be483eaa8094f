import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from automation.models import AutomationTask
from conversations.models import ConversationLink, Message
from ingest.models import Instruction
from tests.factories import PluginClientFactory
from tests.procs import run_in_processes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SESSIONS = ["claude.jsonl", "chatgpt.jsonl", "gemini.jsonl"]


def replay(*args):
    out, err = StringIO(), StringIO()
    call_command("replay", *[str(a) for a in args], stdout=out, stderr=err, verbosity=0)
    return out.getvalue().strip(), err.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize("session", SESSIONS)
def test_replaying_a_fixture_twice_stores_each_message_once(session):
    PluginClientFactory(client_id="laptop-chrome")
    first, _ = replay(FIXTURES / session)
    counts = (Message.objects.count(), Instruction.objects.count(), AutomationTask.objects.count())
    second, _ = replay(FIXTURES / session)

    assert first == "new: 6, duplicate: 1, invalid: 0, skipped: 1"
    assert second == "new: 0, duplicate: 7, invalid: 0, skipped: 1"
    assert (Message.objects.count(), Instruction.objects.count(), AutomationTask.objects.count()) == counts
    assert set(Message.objects.values_list("source", flat=True)) == {"replay"}


@pytest.mark.django_db
def test_fixture_blocks_are_judged_as_the_text_says():
    PluginClientFactory(client_id="laptop-chrome")
    replay(FIXTURES / "claude.jsonl")
    by_message = [
        list(m.instructions.order_by("block_index").values_list("tool", "status"))
        for m in Message.objects.order_by("pk")
    ]
    assert by_message == [
        [("files.list", "pending"), ("files.read", "pending")],
        [("time.now", "pending")],  # the shell.run inside a ````markdown fence is no block
        [("echo", "pending"), ("files.read", "rejected")],  # CRLF; a trailing comma
        [("shell.run", "awaiting_approval"), ("files.write", "awaiting_approval")],
        [("", "rejected"), ("files.delete", "rejected"), ("files.read", "rejected")],
        [],
    ]
    echo = Instruction.objects.get(tool="echo")
    assert echo.params == {"note": "café ☕ — 日本語", "n": 1}
    # The all-rejected message was answered at once; its route is the replayed client.
    deliver = AutomationTask.objects.get(kind="instruction.deliver")
    assert deliver.target_client_id == "laptop-chrome"
    assert ConversationLink.objects.get().client.client_id == "laptop-chrome"


@pytest.mark.django_db
def test_a_broken_line_is_reported_with_its_number_and_the_rest_still_processed(tmp_path):
    lines = (FIXTURES / "claude.jsonl").read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([
        lines[1], "{not json", '["a list"]',
        json.dumps({"type": "browser.final_message", "platform": "bard", "conversation_id": "c", "text": "t"}),
        "", lines[2],
        '{"type": "browser.final_message", "platform": "claude", "conversation_id": "c", "text": "t", "n": NaN}',
    ]) + "\n")

    summary, problems = replay(broken)

    assert summary == "new: 2, duplicate: 0, invalid: 4, skipped: 0"
    assert "line 7: NaN is not a number JSON allows" in problems
    assert "line 2: invalid JSON: Expecting property name enclosed in double quotes at line 1 column 2" in problems
    assert "line 3: a frame must be a JSON object" in problems
    assert "line 4: unknown platform 'bard'" in problems
    assert Message.objects.count() == 2


@pytest.mark.django_db
def test_dry_run_stores_nothing_and_counts_exactly():
    PluginClientFactory(client_id="laptop-chrome")
    summary, _ = replay(FIXTURES / "gemini.jsonl", "--dry-run")
    assert summary == "dry run, nothing stored: new: 6, duplicate: 1, invalid: 0, skipped: 1"
    assert not Message.objects.exists() and not AutomationTask.objects.exists()


@pytest.mark.django_db
def test_force_stores_every_message_again():
    PluginClientFactory(client_id="laptop-chrome")
    replay(FIXTURES / "chatgpt.jsonl")
    summary, _ = replay(FIXTURES / "chatgpt.jsonl", "--force")
    assert summary == "new: 7, duplicate: 0, invalid: 0, skipped: 1"
    assert Message.objects.count() == 13


@pytest.mark.django_db
def test_client_option_overrides_the_recorded_hello():
    PluginClientFactory(client_id="desktop")
    replay(FIXTURES / "claude.jsonl", "--client", "desktop")
    assert ConversationLink.objects.get().client.client_id == "desktop"


@pytest.mark.django_db
def test_unknown_recorded_client_is_reported_and_messages_are_kept_without_route():
    _, problems = replay(FIXTURES / "claude.jsonl")
    assert "line 1: unknown client 'laptop-chrome'" in problems
    assert Message.objects.count() == 6
    assert not ConversationLink.objects.exists()


@pytest.mark.django_db
def test_refuses_a_missing_file_and_an_unknown_client(tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        replay(tmp_path / "missing.jsonl")
    with pytest.raises(CommandError, match="unknown plugin client 'ghost'"):
        replay(FIXTURES / "claude.jsonl", "--client", "ghost")


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_two_processes_replaying_the_same_file_at_once_store_each_message_once():
    PluginClientFactory(client_id="laptop-chrome")
    results = run_in_processes(
        "tests.ingest.workers:replay_file", [(str(FIXTURES / name),) for name in SESSIONS * 2]
    )
    totals = [(r["new"], r["duplicate"]) for r in results]
    assert sum(new for new, _ in totals) == 18  # 6 messages in each of the 3 sessions, once
    assert sum(dup for _, dup in totals) == 2 * 21 - 18
    assert Message.objects.count() == 18
    assert AutomationTask.objects.count() == 3 * AutomationTask.objects.filter(
        message__conversation__platform="claude"
    ).count()
