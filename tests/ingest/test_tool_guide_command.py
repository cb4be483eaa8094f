"""``manage.py tool_guide`` (SPEC §5.5)."""

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ingest.models import ToolPolicy
from ingest.blocks import parse_blocks
from tests.factories import ConversationFactory, ConversationLinkFactory
from tools.registry import Policy

pytestmark = pytest.mark.django_db


def run(*args):
    out = io.StringIO()
    call_command("tool_guide", *args, stdout=out)
    return out.getvalue()


def test_the_platform_guide_is_markdown_whose_examples_parse():
    text = run("--platform", "claude")
    assert text.startswith("# Conductor tool guide (") and len(text) < 6000
    assert parse_blocks(text) and all(block.is_valid for block in parse_blocks(text))


def test_a_conversation_by_either_id_follows_its_own_and_its_clients_policies():
    link = ConversationLinkFactory(conversation__remote_id="abc-123")
    ToolPolicy.objects.create(tool="echo", policy=Policy.DENY, conversation=link.conversation)
    ToolPolicy.objects.create(tool="time.now", policy=Policy.DENY, client=link.client)
    for reference in ("abc-123", str(link.conversation.pk)):
        text = run("--conversation", reference)
        assert "`echo`" not in text and "`time.now`" not in text and "`files.list`" in text
    # Another client's view of the same conversation.
    other = ConversationLinkFactory().client
    assert "`time.now`" in run("--conversation", "abc-123", "--client", other.client_id)


def test_json_has_the_text_the_tools_and_the_limits():
    ConversationLinkFactory(conversation__remote_id="abc-123", conversation__platform="gemini")
    data = json.loads(run("--conversation", "abc-123", "--format", "json"))
    assert data["platform"] == "gemini" and data["conversation_id"] == "abc-123"
    assert data["text"].startswith(f"# Conductor tool guide ({data['version']})")
    assert {tool["name"]: tool["policy"] for tool in data["tools"]}["shell.run"] == Policy.APPROVE
    assert data["limits"]["blocks_per_message"] == 32


@pytest.mark.parametrize("args, message", [
    (["--conversation", "nope"], "no conversation 'nope'"),
    (["--conversation", "dup"], "several platforms: give --platform"),
    (["--platform", "claude", "--client", "nobody"], "no plugin client 'nobody'"),
])
def test_what_cannot_be_found_is_a_clear_error(args, message):
    ConversationFactory(remote_id="dup", platform="claude")
    ConversationFactory(remote_id="dup", platform="chatgpt")
    with pytest.raises(CommandError, match=message):
        run(*args)


def test_platform_picks_among_conversations_of_one_id():
    ConversationFactory(remote_id="dup", platform="claude")
    ConversationFactory(remote_id="dup", platform="chatgpt")
    data = json.loads(run("--conversation", "dup", "--platform", "chatgpt", "--format", "json"))
    assert data["platform"] == "chatgpt"


def test_the_markdown_is_only_the_text_and_a_tool_left_out_is_noted_on_stderr():
    ConversationLinkFactory(conversation__remote_id="abc-123", conversation__owner="alice")
    out, err = io.StringIO(), io.StringIO()
    call_command("tool_guide", "--conversation", "abc-123", stdout=out, stderr=err)
    assert out.getvalue().startswith("# Conductor tool guide (") and "mail.send" not in out.getvalue()
    assert err.getvalue() == (
        "note: mail.send is left out of this guide: no handle to write to yet (owner 'alice'): give another of "
        "the owner's conversations, seen through a plugin, a handle on its admin page (Mail: Handle)\n"
    )
    data = json.loads(run("--conversation", "abc-123", "--format", "json"))
    assert [tool["header"] for tool in data["tools_left_out"]] == ["mail.send"]


def test_nothing_is_noted_when_the_guide_lists_every_callable_tool():
    link = ConversationLinkFactory(conversation__remote_id="abc-123")
    ConversationLinkFactory(conversation__handle="reviewer", client=link.client)
    err = io.StringIO()
    call_command("tool_guide", "--conversation", "abc-123", stdout=io.StringIO(), stderr=err)
    assert err.getvalue() == ""
