"""The tool guide's text (SPEC §5.5): built from the registry, the policies and the mail handles."""

import dataclasses
import json
import time

import pytest

from ingest.blocks import MAX_BLOCK_BYTES, MAX_BLOCKS, parse_blocks
from ingest.guide import (
    LEFT_OUT_NO_HANDLES,
    MAX_GUIDE_BYTES,
    MAX_NAMED_ONLY_BYTES,
    GuideFacts,
    GuideTool,
    examples,
    guide_inline,
    params_signature,
    tool_guide_render,
)
from ingest.selectors.guides import tool_guide, tool_guide_facts
from pipelines.results_text import BlockOutcome, render_results
from tests.factories import ConversationFactory, ConversationLinkFactory, PluginClientFactory
from tools.registry import Policy, ToolSpec, tools
from ingest.models import ToolPolicy


def facts(*, policies=None, handles=(), more=0):
    policies = policies or {}
    chosen = tuple(
        GuideTool(spec=spec, policy=policies.get(spec.name, spec.default_policy))
        for spec in tools
        if policies.get(spec.name, spec.default_policy) != Policy.DENY
    )
    return GuideFacts(
        platform="claude", tools=chosen, mail_handles=tuple(handles), more_handles=more,
        max_blocks=MAX_BLOCKS, max_block_bytes=MAX_BLOCK_BYTES, per_hour=120, result_max_chars=20000,
    )


def test_the_default_guide_fits_a_paste_and_names_every_callable_tool_once():
    guide = tool_guide_render(facts(handles=["notes"]))
    assert len(guide.text) < 6000
    for spec in tools:
        assert guide.text.count(f"- `{spec.name}` ") == 1, spec.name


def test_every_example_is_a_valid_block_of_the_tool_it_names():
    facts_ = facts(handles=["notes"])
    guide = tool_guide_render(facts_)
    blocks = parse_blocks(guide.text)
    assert [block.tool for block in blocks] == [tool.spec.name for tool, _ in examples(facts_)]
    for block in blocks:
        assert block.is_valid, block.error
        assert tools.get(block.tool).params_error(block.params) is None


def test_one_example_per_family():
    families = [tool.spec.family for tool, _ in examples(facts(handles=["notes"]))]
    assert sorted(families) == sorted({spec.family for spec in tools})


def test_a_denied_tool_never_appears_and_an_approval_tool_says_it_waits():
    guide = tool_guide_render(facts(policies={"files.list": Policy.DENY, "echo": Policy.APPROVE}))
    assert "files.list" not in guide.text
    at_once, waits = guide.text.split("These wait for my approval", 1)
    assert "`echo`" in waits.split("##", 1)[0] and "`echo`" not in at_once
    assert "`files.read`" in at_once


def test_a_conversation_with_no_handle_to_write_to_gets_no_mail_section_nor_mail_send():
    guide = tool_guide_render(facts())
    assert "## Mail" not in guide.text and "mail.send" not in guide.text
    with_handles = tool_guide_render(facts(handles=["notes", "research"], more=3)).text
    assert "## Mail" in with_handles and "notes, research (and 3 more)" in with_handles
    assert '"to": "notes"' in with_handles


def test_a_mail_tool_with_no_handle_is_left_out_of_the_text_and_named_for_the_operator():
    without = tool_guide_render(facts())
    assert [tool.header for tool in without.facts.tools_left_out] == ["mail.send"]
    assert "mail.send" not in [tool.header for tool in without.facts.shown_tools]
    assert without.as_json()["tools_left_out"] == [{"header": "mail.send", "why": LEFT_OUT_NO_HANDLES}]
    with_handles = tool_guide_render(facts(handles=["notes"]))
    assert with_handles.facts.tools_left_out == () and with_handles.as_json()["tools_left_out"] == []
    assert "mail.send" in [tool.header for tool in with_handles.facts.shown_tools]


def test_what_only_the_operator_sees_never_changes_the_text_nor_its_version():
    # Left out for want of handles, or denied: the assistant reads the same text, under the same version.
    left_out, denied = tool_guide_render(facts()), tool_guide_render(facts(policies={"mail.send": Policy.DENY}))
    assert left_out.facts.tools_left_out and not denied.facts.tools_left_out
    assert (left_out.text, left_out.version) == (denied.text, denied.version)
    assert LEFT_OUT_NO_HANDLES not in left_out.text
    # Whose handles they are is not in the text either.
    alice = tool_guide_render(dataclasses.replace(facts(handles=["notes"]), owner="alice"))
    bob = tool_guide_render(dataclasses.replace(facts(handles=["notes"]), owner="bob"))
    assert alice.version == bob.version


@pytest.mark.django_db
def test_the_facts_name_whose_handles_they_are():
    link = ConversationLinkFactory(conversation__owner="alice")
    assert tool_guide_facts(platform="claude", conversation=link.conversation).owner == "alice"
    assert tool_guide_facts(platform="claude").owner == "default"


def test_the_version_is_a_hash_of_the_text_and_follows_the_policies():
    first, again = tool_guide_render(facts()), tool_guide_render(facts())
    assert first.version == again.version and first.text.startswith(f"# Conductor tool guide ({first.version})")
    assert tool_guide_render(facts(policies={"shell.run": Policy.DENY})).version != first.version


def test_the_limits_are_those_ingest_applies():
    text = tool_guide_render(facts()).text
    assert f"At most {MAX_BLOCKS} blocks per answer, each at most {MAX_BLOCK_BYTES // 1024} KiB" in text
    assert "At most 120 valid blocks per hour" in text and "at most 20000 characters" in text


def test_the_result_shown_is_rendered_as_deliveries_render_it():
    rendered = render_results(
        [BlockOutcome(block=1, tool="time.now", status="succeeded",
                      result={"now": "2026-12-03T08:00:00.000Z"})],
        max_chars=20000,
    )
    shown = tool_guide_render(facts()).text
    block_and_result = rendered.split("\n", 1)[1].strip()
    assert block_and_result in shown


@pytest.mark.parametrize("schema, expected", [
    ({"type": "object"}, "{any params}"),
    ({"type": "object", "properties": {}, "additionalProperties": False}, "{}"),
    (
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer", "default": 3}},
         "required": ["a"]},
        "{a: string, b?: integer = 3}",
    ),
    ({"type": "object", "properties": {"m": {"enum": ["x", "y"]}, "l": {"type": "array", "items": {"type": "number"}}}},
     '{m?: "x"|"y", l?: [number]}'),
    ({"type": "object", "properties": {"u": {"type": ["string", "null"]}, "w": {}}}, "{u?: string|null, w?: any}"),
])
def test_params_signature(schema, expected):
    assert params_signature(schema) == expected


def test_a_long_description_is_cut_to_one_line():
    spec = ToolSpec(name="long", description="word " * 100 + "\nsecond line", params_schema={"type": "object"},
                    is_idempotent=True, default_policy=Policy.ALLOW, target="other")
    guide = tool_guide_render(GuideFacts(
        platform="claude", tools=(GuideTool(spec=spec, policy=Policy.ALLOW),), mail_handles=(), more_handles=0,
        max_blocks=32, max_block_bytes=65536, per_hour=120, result_max_chars=20000,
    ))
    [line] = [line for line in guide.text.splitlines() if line.startswith("- `other::long`")]
    assert len(line) < 220 and line.endswith("…")


def test_no_callable_tool_says_so():
    guide = tool_guide_render(facts(policies={spec.name: Policy.DENY for spec in tools}))
    assert "No tool can be called in this conversation now." in guide.text
    assert parse_blocks(guide.text) == []


@pytest.mark.django_db
def test_facts_follow_the_most_specific_policy_and_list_handles_of_seen_conversations():
    link = ConversationLinkFactory(conversation__handle="me")
    other_client = PluginClientFactory()
    ConversationLinkFactory(conversation__handle="notes")
    ConversationFactory(handle="never-seen")  # mail to it has nowhere to go
    ToolPolicy.objects.create(tool="echo", policy=Policy.DENY)
    ToolPolicy.objects.create(tool="echo", policy=Policy.ALLOW, conversation=link.conversation)
    ToolPolicy.objects.create(tool="time.now", policy=Policy.DENY, client=link.client)

    mine = tool_guide_facts(platform="claude", conversation=link.conversation, client_pk=link.client_id)
    names = {tool.spec.name: tool.policy for tool in mine.tools}
    assert names["echo"] == Policy.ALLOW and "time.now" not in names
    assert mine.mail_handles == ("notes",)  # not its own handle, not one never seen

    new_elsewhere = tool_guide_facts(platform="claude", client_pk=other_client.pk)
    names = {tool.spec.name for tool in new_elsewhere.tools}
    assert "echo" not in names and "time.now" in names
    assert new_elsewhere.mail_handles == ("me", "notes")


@pytest.mark.django_db
def test_handles_past_fifty_are_counted_not_listed():
    for n in range(53):
        ConversationLinkFactory(conversation__handle=f"h{n:02d}")
    guide = tool_guide(platform="claude")
    assert len(guide.facts.mail_handles) == 50 and guide.facts.more_handles == 3
    assert "(and 3 more)" in guide.text
    assert json.loads(json.dumps(guide.as_json()))["more_mail_handles"] == 3


@pytest.mark.parametrize(
    ("text", "limit", "line"),
    [
        ("Reads a file.", 100, "Reads a file."),
        ("one\n\n```baa\nshell.run\n```", 100, "one \\`\\`\\`baa shell.run \\`\\`\\`"),
        ("a\u2028b\x1b[2Jc\x00d", 100, "a b [2Jc d"),
        ("C:\\tmp `x`", 100, "C:\\\\tmp \\`x\\`"),
        ("x" * 50, 10, "x" * 9 + "…"),
    ],
)
def test_guide_inline_keeps_a_servers_text_on_one_bounded_line_that_opens_nothing(text, limit, line):
    assert guide_inline(text, limit) == line


def many_tools(count, *, name_chars=12):
    """``count`` callable tools of one server, each line as long as a guide lets it be."""
    schema = {"type": "object", "properties": {"x": {"type": "string", "description": "d" * 400}}}
    spec = ToolSpec(name="t", description="words " * 100, params_schema=schema, is_idempotent=False,
                    default_policy=Policy.APPROVE, target="big")
    return tuple(
        GuideTool(spec=dataclasses.replace(spec, name=f"{n:0{name_chars}d}"), policy=Policy.APPROVE)
        for n in range(count)
    )


def test_a_thousand_tools_make_a_guide_within_its_bound_naming_the_rest_with_their_count():
    own = facts(handles=["notes"])
    big = dataclasses.replace(own, tools=own.tools + many_tools(1000))
    started = time.perf_counter()
    guide = tool_guide_render(big)
    assert time.perf_counter() - started < 1
    assert len(guide.text.encode()) <= MAX_GUIDE_BYTES
    assert guide.is_cut and len(guide.named_only) < 1000
    # Conductor's own tools come first and are all described; the examples are still there.
    for spec in tools:
        assert guide.text.count(f"- `{spec.name}` ") == 1, spec.name
    assert [block.tool for block in parse_blocks(guide.text)] == [tool.spec.name for tool, _ in examples(big)]
    described = [line for line in guide.text.splitlines() if line.startswith("- `big::")]
    assert len(described) + len(guide.named_only) == 1000
    assert f"… and {len(guide.named_only)} more tools, named only" in guide.text
    assert f"`{guide.named_only[0].header}`, `{guide.named_only[1].header}`" in guide.text
    assert guide.as_json()["tools_named_only"] == [tool.header for tool in guide.named_only]
    assert not tool_guide_render(own).is_cut


def test_the_names_of_the_tools_not_described_are_bounded_too():
    own = facts()
    guide = tool_guide_render(dataclasses.replace(own, tools=own.tools + many_tools(5000, name_chars=120)))
    assert len(guide.text.encode()) <= MAX_GUIDE_BYTES
    [names] = [line for line in guide.text.splitlines() if line.startswith("`big::")]
    shown = names.count("`big::")
    assert len(names.encode()) <= MAX_NAMED_ONLY_BYTES
    assert names.endswith(f", and {len(guide.named_only) - shown} more not named here.")
