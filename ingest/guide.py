"""The tool guide (SPEC §5.5): the text that teaches a chat's assistant which tools it may call, and how.

Pure: the facts of one conversation (its callable tools with their policies,
the mail handles it can write to, the limits) in, one Markdown text out; no
I/O. ``ingest.selectors.guides.tool_guide_facts`` gathers the facts. The guide's
version is a hash of its text, so the same tools and policies give the same
version on every platform and server.

The text has, in this order: what a block is, one line per callable tool
(params from its JSON Schema, "runs at once" or "waits for approval"), one
worked example per tool family (each parses as a valid block of that tool),
what comes back, the limits, and the mail handles when there are any. Denied
tools are left out by the caller (``GuideFacts.tools`` holds only callable ones).

The text is bounded as a whole (``MAX_GUIDE_BYTES``): a server may list a
thousand tools, and a guide is pasted into a chat. Tools are described in
registry order (Conductor's own first) while their lines fit; the rest are
named only, with their count, within ``MAX_NAMED_ONLY_BYTES``, and past that
counted only (``ToolGuide.named_only``, ``is_cut``).
A mail tool with no handle to write to is left out of the text too, as the
assistant could not use it; the operator's views say so
(``GuideFacts.tools_left_out``, ``LEFT_OUT_NO_HANDLES``) and how to add a handle.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from tools.registry import DEFAULT_TARGET, ExampleFacts, Policy, ToolSpec

INFO_STRING = "baa"
RESULT_INFO_STRING = "baa-result"
VERSION_CHARS = 12
MAX_DESCRIPTION_CHARS = 160  # an MCP server's description can be pages long
MAX_SIGNATURE_CHARS = 300  # an MCP server's schema can name hundreds of params
MAX_HANDLES_SHOWN = 50
# The whole text, in UTF-8 bytes, and within it the line naming the tools there is no room to describe.
MAX_GUIDE_BYTES = 64 * 1024
MAX_NAMED_ONLY_BYTES = 8 * 1024
# The tools that write to other conversations (``mail.send``): shown with the
# handles they can write to, and left out when there are none.
MAIL_FAMILY = "mail"
# Why such a tool is not in the text, for the operator (never in the text itself).
LEFT_OUT_NO_HANDLES = "no handle to write to yet"

JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


@dataclass(frozen=True)
class GuideTool:
    spec: ToolSpec
    policy: str  # Policy.ALLOW or Policy.APPROVE; denied tools are not in a guide

    @property
    def header(self) -> str:
        """The block header that calls the tool: its name, with its target unless it is Conductor's own."""
        spec = self.spec
        return spec.name if spec.target == DEFAULT_TARGET else f"{spec.target}::{spec.name}"

    @property
    def runs_at_once(self) -> bool:
        return self.policy == Policy.ALLOW


@dataclass(frozen=True)
class GuideFacts:
    """Everything a conversation's guide says, read by ``tool_guide_facts``."""

    platform: str
    tools: tuple[GuideTool, ...]  # callable tools in registry order
    mail_handles: tuple[str, ...]  # handles shown (at most MAX_HANDLES_SHOWN)
    more_handles: int  # handles there are beyond those shown
    max_blocks: int
    max_block_bytes: int
    per_hour: int
    result_max_chars: int
    owner: str = ""  # whose handles ``mail_handles`` are (with the owners paired with it)

    @property
    def example_facts(self) -> ExampleFacts:
        return ExampleFacts(mail_handles=self.mail_handles)

    def is_left_out(self, tool: GuideTool) -> bool:
        """Whether the text leaves out this callable tool: a mail tool with no handle to write to."""
        return tool.spec.family == MAIL_FAMILY and not self.mail_handles

    @property
    def shown_tools(self) -> tuple[GuideTool, ...]:
        """The callable tools the text lists."""
        return tuple(tool for tool in self.tools if not self.is_left_out(tool))

    @property
    def tools_left_out(self) -> tuple[GuideTool, ...]:
        """The callable tools the text leaves out, for the operator's views (``LEFT_OUT_NO_HANDLES``)."""
        return tuple(tool for tool in self.tools if self.is_left_out(tool))


@dataclass(frozen=True)
class ToolGuide:
    version: str
    text: str
    facts: GuideFacts
    # Callable tools the text names without describing them (their lines would pass MAX_GUIDE_BYTES).
    named_only: tuple[GuideTool, ...] = ()

    @property
    def is_cut(self) -> bool:
        """Whether the text leaves tools undescribed for want of room."""
        return bool(self.named_only)

    def as_json(self, *, conversation_id: str | None = None) -> dict[str, Any]:
        """The guide and what it was made of, as ``tool_guide --format json`` prints it."""
        facts = self.facts
        return {
            "version": self.version,
            "platform": facts.platform,
            "conversation_id": conversation_id,
            "text": self.text,
            "tools": [
                {
                    "target": tool.spec.target, "name": tool.spec.name, "header": tool.header,
                    "policy": tool.policy, "description": tool.spec.description,
                    "params_schema": tool.spec.params_schema,
                }
                for tool in facts.tools
            ],
            "tools_left_out": [
                {"header": tool.header, "why": LEFT_OUT_NO_HANDLES} for tool in facts.tools_left_out
            ],
            "tools_named_only": [tool.header for tool in self.named_only],
            "max_bytes": MAX_GUIDE_BYTES,
            "mail_handles": list(facts.mail_handles),
            "more_mail_handles": facts.more_handles,
            "limits": {
                "blocks_per_message": facts.max_blocks, "block_bytes": facts.max_block_bytes,
                "valid_blocks_per_hour": facts.per_hour, "result_chars": facts.result_max_chars,
            },
        }


# --- params from a JSON Schema ----------------------------------------------------------------


def _type_of(schema: Any) -> str:
    """A property's type as one short word or union, from its schema."""
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "|".join(json.dumps(value, ensure_ascii=False) for value in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind if k in JSON_TYPES) or "any"
    if kind == "array":
        return f"[{_type_of(schema.get('items'))}]"
    if kind in JSON_TYPES:
        return kind
    return "any"


def params_signature(schema: dict[str, Any]) -> str:
    """``{path: string, max_bytes?: integer = 65536}``: each param, ``?`` when optional, its default."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "{}" if schema.get("additionalProperties") is False else "{any params}"
    required = set(schema.get("required") or ())
    parts = []
    for name, prop in properties.items():
        part = f"{name}{'' if name in required else '?'}: {_type_of(prop)}"
        if isinstance(prop, dict) and "default" in prop:
            part += f" = {json.dumps(prop['default'], ensure_ascii=False)}"
        parts.append(part)
    return "{" + ", ".join(parts) + "}"


CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def guide_inline(text: str, limit: int) -> str:
    """``text`` as part of one line of the guide, at most ``limit`` characters before escaping.

    An MCP server's description and schema reach the text the assistant
    reads: on one line (newlines and control characters as spaces), cut with
    "…", backslashes and backticks escaped, so that none of it can open a
    block, a code span or a section of its own.
    """
    line = " ".join(CONTROL_CHARACTERS.sub(" ", text[: limit * 8]).split())
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line.replace("\\", "\\\\").replace("`", "\\`")


# --- the text ---------------------------------------------------------------------------------


def block_text(header: str, params: dict[str, Any]) -> str:
    """A ```baa block calling ``header`` with ``params`` (no params line for ``{}``)."""
    body = header if not params else f"{header}\n{json.dumps(params, ensure_ascii=False)}"
    return f"```{INFO_STRING}\n{body}\n```"


def examples(facts: GuideFacts) -> list[tuple[GuideTool, dict[str, Any]]]:
    """One worked example per tool family: the first callable tool of the family that has one."""
    chosen: dict[str, tuple[GuideTool, dict[str, Any]]] = {}
    for tool in facts.tools:
        if tool.spec.family in chosen:
            continue
        params = tool.spec.example_params(facts.example_facts)
        if params is not None:
            chosen[tool.spec.family] = (tool, params)
    return list(chosen.values())


def _tool_line(tool: GuideTool) -> str:
    return (
        f"- `{tool.header}` {guide_inline(params_signature(tool.spec.params_schema), MAX_SIGNATURE_CHARS)}: "
        f"{guide_inline(tool.spec.description, MAX_DESCRIPTION_CHARS)}"
    )


def _size(lines: list[str]) -> int:
    """The bytes ``lines`` take in the text, each with its newline."""
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def described_tools(
    tools: tuple[GuideTool, ...], *, room: int
) -> tuple[list[tuple[GuideTool, str]], tuple[GuideTool, ...]]:
    """Which of ``tools`` get their line within ``room`` bytes: those tools with their lines, and the rest.

    In order, so Conductor's own tools (first in the registry) are described
    before any server's. When not every line fits, ``MAX_NAMED_ONLY_BYTES``
    of the room are kept for the names of the rest.
    """
    lines = [(tool, _tool_line(tool)) for tool in tools]
    # 200: both sections' headers, with their blank lines.
    if _size([line for _, line in lines]) + 200 <= room:
        return lines, ()
    room -= MAX_NAMED_ONLY_BYTES + 200
    count = 0
    for _, line in lines:
        room -= _size([line])
        if room < 0:
            break
        count += 1
    return lines[:count], tools[count:]


def _named_only_lines(tools: tuple[GuideTool, ...]) -> list[str]:
    """The paragraph naming the tools there is no room to describe, within ``MAX_NAMED_ONLY_BYTES``."""
    if not tools:
        return []
    intro = (
        f"… and {len(tools)} more tools, named only (no room to describe them here; a block with params "
        "that do not fit comes back with an error saying what does, and each waits for my approval "
        "unless I allowed it):"
    )
    room = MAX_NAMED_ONLY_BYTES - len(intro.encode("utf-8")) - 80
    names = []
    for tool in tools:
        name = f"`{tool.header}`"
        room -= len(name.encode("utf-8")) + 2
        if room < 0:
            break
        names.append(name)
    rest = len(tools) - len(names)
    tail = f", and {rest} more not named here." if rest else "."
    return ["", intro, ", ".join(names) + tail]


def _body(facts: GuideFacts) -> tuple[str, tuple[GuideTool, ...]]:
    """The text after its title, and the tools it names without describing."""
    tools = facts.shown_tools
    first = examples(facts)
    head = [
        "You can run tools on my computer through Conductor. To call a tool, write a fenced code block "
        f"whose info string is `{INFO_STRING}`: its first line is the tool's name, the rest one JSON object "
        "of params (leave it out when there are none). Conductor reads your answer once it is complete, runs "
        "its blocks one at a time in order, and then posts the results as my next message. Write a block "
        "only when you want it run; to show one without running it, use another info string.",
        "",
        "## Tools",
    ]
    if not tools:
        head += ["", "No tool can be called in this conversation now."]
    tail = ["", "`name?` means optional; `= value` is the default. File paths are relative to the "
            "workspace folder; nothing outside it can be reached."]
    if first:
        tail += ["", "## Examples"]
        for tool, params in first:
            tail += ["", block_text(tool.header, params)]
    tail += [
        "",
        "## What comes back",
        "",
        f"One message with a line and a `{RESULT_INFO_STRING}` block of JSON per block you wrote, in order:",
        "",
        "Block 1 · time.now · succeeded",
        f"```{RESULT_INFO_STRING}",
        '{"block": 1, "tool": "time.now", "ok": true, "result": {"now": "2026-12-03T08:00:00.000Z"}}',
        "```",
        "",
        'A block that failed or was refused has `"ok": false`, a `"status"` and an `"error"` saying why '
        "(a bad header or JSON, an unknown tool, params that do not fit, a denied tool, the hourly limit, "
        "the tool's own error). Correct the block and send it again in a new answer. A result cut to fit "
        'is marked `"truncated": true`.',
        "",
        "## Limits",
        "",
        f"- At most {facts.max_blocks} blocks per answer, each at most {facts.max_block_bytes // 1024} KiB.",
        f"- At most {facts.per_hour} valid blocks per hour in this conversation; more are refused.",
        f"- All results of one answer together at most {facts.result_max_chars} characters.",
    ]
    mail = next((tool for tool in tools if tool.spec.family == MAIL_FAMILY), None)
    if mail is not None:
        more = f" (and {facts.more_handles} more)" if facts.more_handles else ""
        tail += [
            "",
            "## Mail",
            "",
            f"`{mail.header}` sends a text to another conversation as its next user message. "
            f"You can write to: {', '.join(facts.mail_handles)}{more}. An answer comes back as a mail to you.",
        ]
    # The title (``tool_guide_render``) takes a line and a blank one.
    room = MAX_GUIDE_BYTES - _size(head) - _size(tail) - 64
    described, named_only = described_tools(tools, room=room)
    at_once = [line for tool, line in described if tool.runs_at_once]
    approval = [line for tool, line in described if not tool.runs_at_once]
    lines = list(head)
    if at_once:
        lines += ["", "These run at once:", *at_once]
    if approval:
        lines += ["", "These wait for my approval (I may refuse; a refusal comes back as an error):", *approval]
    lines += _named_only_lines(named_only)
    return "\n".join(lines + tail) + "\n", named_only


def tool_guide_render(facts: GuideFacts) -> ToolGuide:
    """The guide for these facts; its version is a hash of its text, which names the version in its title."""
    body, named_only = _body(facts)
    version = hashlib.sha256(body.encode("utf-8")).hexdigest()[:VERSION_CHARS]
    text = f"# Conductor tool guide ({version})\n\n{body}"
    return ToolGuide(version=version, text=text, facts=facts, named_only=named_only)
