"""The ```baa block parser (SPEC §5). Pure: text in, blocks out, never raises.

Where a fenced block starts and ends is decided by a CommonMark parser, not
by a scanner of our own: markdown-it-py, with its ``commonmark`` preset. It
was picked for correctness first: it passes every example of CommonMark
0.31.2, the version SPEC §5 names (the tests check the sections that bear on
fences against the spec's own examples), and each fence token carries its
line range, which gives precise error positions and tells a closed fence from
an unclosed one (see ``_is_closed``). cmarkgfm, the other candidate, binds
GitHub's fork of the reference C parser, which follows spec 0.29 and only
renders HTML: no line ranges, no way to see where a fence ended. markdown-it-py
is pure Python, so it is the slower of the two (see bench/block_parsing.py);
only block structure is needed here, so its inline pass is switched off.

So a ``baa`` fence in a list item or a block quote, at any depth, is a block,
and one that CommonMark reads as the content of another fence, an indented
code block or an HTML block is not. The one deliberate difference from
CommonMark: a fence that no closing fence line closes (CommonMark closes it at
the end of the text or of its list item or block quote) is not a block.
Markdown-it does not read a container nested deeper than ``MAX_NESTING``
levels (a block quote counts one, a list two: the list and its item), nor,
past such a list, the rest of the text: fences there are not blocks. That only
ever drops blocks, no assistant nests ten lists, and it bounds the recursion.

Only fences whose info string is exactly ``baa`` are blocks. A block's body is
the fence's content as CommonMark gives it: container markers and the item's
indentation removed, tabs expanded as CommonMark expands them. The body is a
header line ``TOOL`` or ``TARGET::TOOL`` (the first non-blank line), then
optionally one JSON object of params. A block that breaks a rule is still
returned, with ``error`` set, so the chat can be told exactly what was wrong;
lines and columns in errors count in the whole message, so the author can
find the spot.

A message holds at most ``MAX_BLOCKS`` blocks. The blocks past that are only
counted, never kept or parsed, and come back as one rejected block that says
how many were ignored, so the work a message costs past the limit is the parse
that finds its fences, whatever the number of blocks (SPEC §5).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from markdown_it import MarkdownIt
from markdown_it.token import Token

from ingest.jsoncheck import JsonRefused, loads_checked
from tools.registry import DEFAULT_TARGET

INFO_STRING = "baa"
MAX_BLOCKS = 32
MAX_BLOCK_BYTES = 64 * 1024
MAX_NESTING = 20  # markdown-it's own default for its commonmark preset

NAME = r"[a-z][a-z0-9_.-]*"
TARGET_NAME = r"[a-z][a-z0-9_-]*"
# A tool of an MCP target is written exactly as its server lists it (SPEC §5).
MCP_TOOL_NAME = r"[A-Za-z0-9_.-]{1,128}"
HEADER_RE = re.compile(rf"^(?:(?P<target>{TARGET_NAME})::(?P<mcp_tool>{MCP_TOOL_NAME})|(?P<tool>{NAME}))$")
# Every line that opens a ``baa`` fence ends like this, whatever its container.
# Fixed width before the info string, so it never backtracks over a long run.
MAY_OPEN_BAA_RE = re.compile(rf"[`~]{{3}}[ \t]*{INFO_STRING}[ \t]*$", re.MULTILINE)

# Block structure only: fences are found by the block rules, all of which stay
# on, since each one decides where other blocks (fences among them) start and end.
_COMMONMARK = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).disable(["inline", "text_join"])


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


class _Source:
    """The message as CommonMark reads it, with its lines split only when an error needs one."""

    def __init__(self, text: str) -> None:
        # CommonMark's line ends (CRLF, CR) become LF and NUL becomes U+FFFD, as
        # markdown-it would do itself; done here, error positions are counted
        # in the very text it reads. The final LF makes every line of a body
        # end in one, which _is_closed counts on; it changes no block.
        text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "\ufffd")
        self.text = text if text.endswith("\n") else text + "\n"

    @cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n")


class _Fence(NamedTuple):
    line: int  # 1-based line of the opening fence
    body: list[str]  # the content's lines as CommonMark gives them
    source: _Source
    end: int  # 1-based line of the closing fence


def _is_baa(token: Token) -> bool:
    # The info string is what follows the fence, trimmed of spaces and tabs.
    return token.type == "fence" and token.info.strip(" \t") == INFO_STRING


def _is_closed(token: Token) -> bool:
    """Whether a closing fence line ended the fence, not the end of the text or of its container.

    markdown-it maps a fence to the lines from its opening fence up to, not
    including, ``map[1]``, which is past the closing fence line when there is
    one, and gives as content every line between the opening fence and that
    end, each ending in LF (the text ends in one, see ``_Source``). So the map
    holds one line more than the opening fence and its content exactly when a
    closing line closed it: in a list item or a block quote too, where the
    content ends where the container does. The tests pin this on the spec's
    own unclosed fences, so a markdown-it that counts otherwise fails them.
    """
    start, end = token.map or (0, 0)
    return end - start - 1 > token.content.count("\n")


class _Scan(NamedTuple):
    kept: list[_Fence]  # the first closed ``baa`` fences, with their content
    ignored: int  # closed ``baa`` fences after those, counted only
    first_ignored_line: int  # the opening line of the first ignored one; 0 when none is


def _scan(text: str, *, keep: int) -> _Scan:
    """The first ``keep`` closed ``baa`` fences, in message order, and a count of the rest."""
    source = _Source(text)
    if not MAY_OPEN_BAA_RE.search(source.text):
        return _Scan([], 0, 0)  # no line can open a block: spare the parse
    kept: list[_Fence] = []
    ignored = first_ignored_line = 0
    for token in _COMMONMARK.parse(source.text):
        if not (_is_baa(token) and _is_closed(token)):
            continue
        line = token.map[0] + 1
        if len(kept) < keep:
            kept.append(_Fence(line, token.content.split("\n")[:-1], source, token.map[1]))
        else:
            ignored += 1
            first_ignored_line = first_ignored_line or line
    return _Scan(kept, ignored, first_ignored_line)


def _json_object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            # Echoed as much as a bad header is: an assistant's key may be as long as its block.
            raise ValueError(f"duplicate key {key[:80]!r}" + ("…" if len(key) > 80 else ""))
        result[key] = value
    return result


def _message_column(source_line: str, body_line: str, column: int) -> int:
    """The 1-based column in the message's line of the ``column``-th character of ``body_line``.

    ``body_line`` is the end of ``source_line`` with container markers and
    indentation cut off, except that CommonMark writes a tab it cut into as
    the spaces left of it: a column among those spaces is the tab's.
    """
    rest, added = body_line, 0
    while rest and not source_line.endswith(rest):
        rest, added = rest[1:], added + 1
    start = len(source_line) - len(rest)
    return start if column <= added else start + column - added


def _json_error_position(fence: _Fence, body_index: int, exc: json.JSONDecodeError) -> str:
    """``line L, column C`` in the whole message for ``exc``, raised on the params that start at ``body_index``."""
    at = body_index + exc.lineno - 1
    line = fence.line + 1 + at
    column = _message_column(fence.source.lines[line - 1], fence.body[at], exc.colno)
    return f"line {line}, column {column}"


def _parse_block(fence: _Fence, index: int) -> Block:
    raw = "\n".join(fence.body)

    def rejected(error: str, target: str = "", tool: str = "") -> Block:
        return Block(index=index, line=fence.line, raw_text=raw, target=target, tool=tool, error=error)

    size = len(raw.encode("utf-8"))
    if size > MAX_BLOCK_BYTES:
        return rejected(f"block is {size} bytes; the limit is {MAX_BLOCK_BYTES} bytes per block")

    header_at = next((i for i, line in enumerate(fence.body) if line.strip()), None)
    if header_at is None:
        return rejected("empty block: its first line must name a tool, e.g. files.read")
    header = fence.body[header_at].strip()
    match = HEADER_RE.match(header)
    if not match:
        return rejected(
            f"bad header {header[:80]!r}: expected TOOL or TARGET::TOOL, "
            f"TOOL matching {NAME}, TARGET matching {TARGET_NAME}"
        )

    target, tool = match["target"] or DEFAULT_TARGET, match["tool"] or match["mcp_tool"]
    if target == DEFAULT_TARGET and not re.fullmatch(NAME, tool):
        return rejected(f"bad header {header[:80]!r}: the tools of {DEFAULT_TARGET} match {NAME}")
    params_text = "\n".join(fence.body[header_at + 1 :])
    params: Any = {}
    if params_text.strip():
        try:
            params = loads_checked(params_text, object_pairs_hook=_json_object_pairs)
        except json.JSONDecodeError as exc:
            where = _json_error_position(fence, header_at + 1, exc)
            return rejected(f"params are not valid JSON: {exc.msg} ({where})", target, tool)
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
    """Every closed ```baa block of ``text``, valid or not, in order, up to ``MAX_BLOCKS``.

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


class BlockSpan(NamedTuple):
    """Where block ``index`` sits in its message: lines ``first`` to ``last`` (1-based, fences included)."""

    index: int
    first: int
    last: int


def block_spans(text: str) -> tuple[list[str], list[BlockSpan]]:
    """The lines of ``text`` as the parser reads them, and where each kept block sits among them.

    The indexes are those ``parse_blocks`` gives the same text (blocks past
    ``MAX_BLOCKS`` have no span). For showing a message with its blocks
    marked; a line of a block inside a list item or a block quote keeps its
    container's markers.
    """
    scan = _scan(text, keep=MAX_BLOCKS)
    lines = _Source(text).lines[:-1]  # the text ends in LF: the last split is empty
    return lines, [BlockSpan(index, fence.line, fence.end) for index, fence in enumerate(scan.kept, start=1)]
