"""The ```baa block parser (SPEC §5). Pure: text in, blocks out, never raises.

Fences follow CommonMark: a line indented at most three spaces opening with
three or more backticks or tildes; the closing fence uses the same character,
is at least as long, and carries nothing but spaces after it. An unclosed
fence runs to the end of the text (so it hides any fence after it) and is not
a block. Only fences whose info string is exactly ``baa`` are blocks; every
other fence is skipped whole, so a ``baa`` fence inside it is not a block.

Each block's content is: a header line ``TOOL`` or ``TARGET::TOOL`` (the
first non-blank line), then optionally one JSON object of params. A block
that breaks a rule is still returned, with ``error`` set, so the chat can be
told exactly what was wrong.

A message holds at most ``MAX_BLOCKS`` blocks. The blocks past that are only
counted, never kept or parsed, and come back as one rejected block that says
how many were ignored, so the work a message costs past the limit is the scan
for its fences, whatever the number of blocks (SPEC §5).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ingest.jsoncheck import JsonRefused, loads_checked

INFO_STRING = "baa"
DEFAULT_TARGET = "conductor"
MAX_BLOCKS = 32
MAX_BLOCK_BYTES = 64 * 1024

NAME = r"[a-z][a-z0-9_.-]*"
HEADER_RE = re.compile(rf"^(?:(?P<target>{NAME})::)?(?P<tool>{NAME})$")
OPENING_FENCE_RE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    """One ```baa block. ``index`` counts from 1; ``line`` is the 1-based line of its opening fence."""

    index: int
    line: int
    raw_text: str
    target: str = ""
    tool: str = ""
    params: dict[str, Any] | None = None
    error: str = ""

    @property
    def is_valid(self) -> bool:
        return not self.error


@dataclass
class _Fence:
    char: str
    length: int
    indent: int
    info: str
    line: int
    content: list[str] = field(default_factory=list)


def _opening_fence(line: str, line_number: int) -> _Fence | None:
    match = OPENING_FENCE_RE.match(line)
    if not match:
        return None
    fence, info = match["fence"], match["info"]
    if fence[0] == "`" and "`" in info:
        return None  # CommonMark: a backtick fence's info string has no backticks
    return _Fence(fence[0], len(fence), len(match["indent"]), info.strip(), line_number)


def _closes(fence: _Fence, line: str) -> bool:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3:
        return False
    run = len(stripped) - len(stripped.lstrip(fence.char))
    return run >= fence.length and stripped[run:].strip(" \t") == ""


def _dedent(line: str, indent: int) -> str:
    removable = len(line) - len(line.lstrip(" "))
    return line[min(indent, removable):]


class _Scan(NamedTuple):
    kept: list[_Fence]  # the first closed top-level ``baa`` fences, with their content
    ignored: int  # closed top-level ``baa`` fences after those, counted only
    first_ignored_line: int  # the opening line of the first ignored one; 0 when none is


def _scan(text: str, *, keep: int) -> _Scan:
    """The first ``keep`` closed top-level ``baa`` fences, in order, and a count of the rest.

    Content is gathered only for the fences kept: every other fence's lines
    are read just to find where it closes.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[_Fence] = []
    ignored = first_ignored_line = 0
    open_fence: _Fence | None = None
    is_kept = False
    for number, line in enumerate(lines, start=1):
        if open_fence is None:
            open_fence = _opening_fence(line, number)
            is_kept = open_fence is not None and open_fence.info == INFO_STRING and len(kept) < keep
        elif _closes(open_fence, line):
            if is_kept:
                kept.append(open_fence)
            elif open_fence.info == INFO_STRING:
                ignored += 1
                first_ignored_line = first_ignored_line or open_fence.line
            open_fence = None
        elif is_kept:
            open_fence.content.append(_dedent(line, open_fence.indent))
    return _Scan(kept, ignored, first_ignored_line)


def _json_object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _parse_block(fence: _Fence, index: int) -> Block:
    raw = "\n".join(fence.content)

    def rejected(error: str, target: str = "", tool: str = "") -> Block:
        return Block(index=index, line=fence.line, raw_text=raw, target=target, tool=tool, error=error)

    size = len(raw.encode("utf-8"))
    if size > MAX_BLOCK_BYTES:
        return rejected(f"block is {size} bytes; the limit is {MAX_BLOCK_BYTES} bytes per block")

    header_at = next((i for i, line in enumerate(fence.content) if line.strip()), None)
    if header_at is None:
        return rejected("empty block: its first line must name a tool, e.g. files.read")
    header = fence.content[header_at].strip()
    match = HEADER_RE.match(header)
    if not match:
        return rejected(
            f"bad header {header[:80]!r}: expected TOOL or TARGET::TOOL, "
            f"each name matching {NAME}"
        )

    target, tool = match["target"] or DEFAULT_TARGET, match["tool"]
    params_text = "\n".join(fence.content[header_at + 1 :])
    params: Any = {}
    if params_text.strip():
        try:
            params = loads_checked(params_text, object_pairs_hook=_json_object_pairs)
        except json.JSONDecodeError as exc:
            # Lines counted in the whole message, so the author can find the spot.
            line = fence.line + header_at + 1 + exc.lineno
            return rejected(
                f"params are not valid JSON: {exc.msg} (line {line}, column {exc.colno})", target, tool
            )
        except JsonRefused as exc:
            return rejected(f"params cannot be taken: {exc.detail}", target, tool)
        except ValueError as exc:
            return rejected(f"params are not valid JSON: {exc}", target, tool)
        if not isinstance(params, dict):
            return rejected(f"params must be one JSON object, got {_json_type(params)}", target, tool)

    return Block(index=index, line=fence.line, raw_text=raw, target=target, tool=tool, params=params)


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _overflow(ignored: int, line: int) -> Block:
    """The one rejection standing for the ``ignored`` blocks past ``MAX_BLOCKS``, the first at ``line``."""
    if ignored == 1:
        more = f"1 more block from line {line} was ignored"
    else:
        more = f"{ignored} more blocks from line {line} on were ignored"
    return Block(
        index=MAX_BLOCKS + 1, line=line, raw_text="",
        error=f"too many blocks: a message may hold at most {MAX_BLOCKS}; {more}",
    )


def parse_blocks(text: str) -> list[Block]:
    """Every closed top-level ```baa block of ``text``, valid or not, in order, up to ``MAX_BLOCKS``.

    When ``text`` holds more, the list ends with one more rejected block
    (index ``MAX_BLOCKS + 1``, the line of the first block past the limit, no
    raw text, no tool) whose error says how many blocks were ignored; the list
    is never longer than ``MAX_BLOCKS + 1``.
    """
    scan = _scan(text, keep=MAX_BLOCKS)
    blocks = [_parse_block(fence, index) for index, fence in enumerate(scan.kept, start=1)]
    if scan.ignored:
        blocks.append(_overflow(scan.ignored, scan.first_ignored_line))
    return blocks
