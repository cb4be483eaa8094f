"""The text Conductor posts back into a chat once a message's blocks finished (SPEC §5.3).

Pure: outcomes in, one user message out; no I/O, never raises (what a
message's outcomes are is read by ``pipelines.deliveries``). The text is a
first line counting the outcomes, then for each block (sorted by ``block``) a
header line and a fenced ``baa-result`` block holding one line of JSON::

    Block 1 · files.read · succeeded
    ```baa-result
    {"block": 1, "tool": "files.read", "ok": true, "result": {"text": "buy milk", "size": 8, "truncated": false}}
    ```

Members come in this order: ``block``, ``tool``, ``ok``, then for a block that
did not succeed ``status`` and ``error``, then ``result`` (always on success,
otherwise only when there is one), then ``"truncated": true`` when a value of
the block was cut.

The JSON never spans two lines: besides JSON's own escapes, the characters
some readers take as line breaks (U+0085, U+2028, U+2029) and lone surrogates
(which could not be encoded as UTF-8) are written as ``\\uXXXX`` escapes. A
line that starts with ``{`` can never close the fence, so three backticks
always suffice.

``max_chars`` bounds the whole text, counted in characters (``len``), not
bytes: the text is never longer. When the text would be longer, values are
replaced by a string preview (the beginning of a string value, or of the JSON
text of any other value, ending with "…"): results first, errors only if
cutting every result is not enough. The fewest, largest values are cut, the
room left is shared evenly among them, and values that do not need cutting
stay whole, so the text comes as close to ``max_chars`` as the previews allow.
A value too short for a preview to save room is never cut.

When even the minimal rendering (every value that can shrink cut to a bare
"…") is too long, the text shows the first blocks only and ends with a line
saying which and how many block outcomes were left out; the first line still
counts them all. The blocks shown are as many as fit with every value longer
than ``PREVIEW_WHEN_LEAVING_OUT`` characters (errors too) cut to a preview of
at most that; when not one block fits so, as many as fit with the minimal
rendering, their values cut as above to the room there is. When not even one
block fits (a tiny ``max_chars``), the first line and that last line are cut
to ``max_chars``, and the text holds no ``baa-result`` block.

Rendering is linear in the outcomes (bar one sort by size): each block's
length is measured once and updated as its values are cut, never measured
again for the whole text.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

INFO_STRING = "baa-result"
FENCE = "```"
ELLIPSIS = "…"
MAX_NAME_CHARS = 100  # a rejected block's header can be anything; keep the header line short
# When blocks must be left out, the values of the ones shown are cut to at most this many characters.
PREVIEW_WHEN_LEAVING_OUT = 200

SUCCEEDED = "succeeded"
FAILED = "failed"
REJECTED = "rejected"
CANCELLED = "cancelled"
STATUSES = (SUCCEEDED, FAILED, REJECTED, CANCELLED)

NO_BLOCKS = "Conductor results: the message held no instruction blocks."
NO_ERROR_MESSAGE = "no error message was recorded"

_TRUNCATED_MEMBER = ', "truncated": true'
# Characters left raw by json.dumps(ensure_ascii=False) that could still split
# a line (str.splitlines, some chat clients) or fail to encode as UTF-8.
_LINE_UNSAFE_RE = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")
_RESULT_BLOCK_RE = re.compile(
    rf"^(?P<fence>`{{3,}}|~{{3,}})[ \t]*{INFO_STRING}[ \t]*\n(?P<body>.*?)\n[ \t]*(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class BlockOutcome:
    """How one block of a message ended.

    ``tool`` is the header as the AI wrote it (``files.read``, or
    ``TARGET::TOOL`` when the target is not ``conductor``). ``result`` may be
    present on a failure too, e.g. ``shell.run``'s output on a non-zero exit.
    """

    block: int
    tool: str
    status: str  # one of STATUSES
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == SUCCEEDED


def _json_text(value: Any) -> str:
    """``value`` as one line of JSON; a value JSON cannot hold becomes its repr, as a string."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
    except (TypeError, ValueError, RecursionError):
        # NaN, non-string keys, cycles: a tool's bug must not lose the whole delivery.
        return json.dumps(repr(value), ensure_ascii=False)


def _make_line_safe(json_text: str) -> str:
    # These characters only occur inside JSON strings, where an escape means the same.
    return _LINE_UNSAFE_RE.sub(lambda match: f"\\u{ord(match[0]):04x}", json_text)


def _encode(value: Any) -> str:
    return _make_line_safe(_json_text(value))


MINIMAL_PREVIEW = _encode(ELLIPSIS)


def _one_line(text: str, limit: int) -> str:
    """``text`` with its whitespace runs (line breaks included) collapsed, cut to ``limit`` characters."""
    collapsed = " ".join(str(text).split())
    collapsed = _LINE_UNSAFE_RE.sub("\ufffd", collapsed)
    return collapsed if len(collapsed) <= limit else collapsed[: limit - 1] + ELLIPSIS


def _preview(source: str, budget: int) -> str:
    """The JSON string of the longest beginning of ``source`` plus "…" whose encoding fits ``budget``.

    Returns ``MINIMAL_PREVIEW`` when even the shortest preview is over budget;
    callers make sure that does not happen. The preview never holds all of
    ``source``, so it is always a cut.
    """
    # Each character encodes to at least one, so no more than ``budget`` can fit.
    low, high = 0, max(0, min(len(source) - 1, budget))
    while low < high:
        middle = (low + high + 1) // 2
        if len(_encode(source[:middle] + ELLIPSIS)) <= budget:
            low = middle
        else:
            high = middle - 1
    return _encode(source[:low] + ELLIPSIS)


class _Value:
    """A result or an error in a block's JSON, whole or cut to a preview."""

    def __init__(self, key: str, value: Any) -> None:
        self.key = key
        json_text = _json_text(value)
        self.whole = _make_line_safe(json_text)
        self.source = value if isinstance(value, str) else json_text
        self.encoded = self.whole
        self.is_truncated = False

    @property
    def can_shrink(self) -> bool:
        # Cutting must save room even when it adds the block's "truncated" member.
        return len(self.whole) > len(MINIMAL_PREVIEW) + len(_TRUNCATED_MEMBER)

    def keep_whole(self) -> None:
        self.encoded, self.is_truncated = self.whole, False

    def cut_to(self, budget: int) -> None:
        self.encoded, self.is_truncated = _preview(self.source, budget), True


class _RenderedBlock:
    def __init__(self, outcome: BlockOutcome) -> None:
        tool = _one_line(outcome.tool, MAX_NAME_CHARS) or "?"
        status = _one_line(outcome.status, MAX_NAME_CHARS)
        self.block = outcome.block
        self.header = f"Block {outcome.block} · {tool} · {status}"
        members = [f'"block": {_encode(outcome.block)}', f'"tool": {_encode(tool)}', f'"ok": {_encode(outcome.ok)}']
        self.values: list[_Value] = []
        if outcome.ok:
            self.values.append(_Value("result", outcome.result))
        else:
            members.append(f'"status": {_encode(status)}')
            error = outcome.error if outcome.error is not None else NO_ERROR_MESSAGE
            self.values.append(_Value("error", str(error)))
            if outcome.result is not None:
                self.values.append(_Value("result", outcome.result))
        self.head = "{" + ", ".join(members)
        # Everything but the values and the "truncated" member, which change as values are cut.
        self.fixed_length = len(self._text(["" for _ in self.values], is_truncated=False))

    @property
    def is_truncated(self) -> bool:
        return any(value.is_truncated for value in self.values)

    def length(self) -> int:
        flag = len(_TRUNCATED_MEMBER) if self.is_truncated else 0
        return self.fixed_length + sum(len(value.encoded) for value in self.values) + flag

    def cut_values_to(self, preview: int) -> None:
        """Cut every value that can shrink and is longer than ``preview`` to a preview of at most that."""
        for value in self.values:
            if value.can_shrink and len(value.whole) > preview:
                value.cut_to(preview)

    def length_at_most(self, preview: int) -> int:
        """The block's length with every value that can shrink and is longer than ``preview`` cut to it."""
        cut = [value.can_shrink and len(value.whole) > preview for value in self.values]
        lengths = [preview if is_cut else len(value.whole) for value, is_cut in zip(self.values, cut, strict=True)]
        return self.fixed_length + sum(lengths) + (len(_TRUNCATED_MEMBER) if any(cut) else 0)

    def text(self) -> str:
        return self._text([value.encoded for value in self.values], is_truncated=self.is_truncated)

    def _text(self, encoded: list[str], *, is_truncated: bool) -> str:
        members = "".join(f', "{value.key}": {text}' for value, text in zip(self.values, encoded, strict=True))
        flag = _TRUNCATED_MEMBER if is_truncated else ""
        return f"{self.header}\n{FENCE}{INFO_STRING}\n{self.head}{members}{flag}}}\n{FENCE}"


_SEPARATOR = "\n\n"


def _summary(outcomes: Sequence[BlockOutcome]) -> str:
    counts = Counter(_one_line(outcome.status, MAX_NAME_CHARS) for outcome in outcomes)
    order = [status for status in STATUSES if status in counts] + sorted(set(counts) - set(STATUSES))
    tally = ", ".join(f"{counts[status]} {status}" for status in order)
    noun = "block" if len(outcomes) == 1 else "blocks"
    return f"Conductor results for {len(outcomes)} {noun} ({tally})"


def _length(summary: str, blocks: list[_RenderedBlock]) -> int:
    return len(summary) + sum(len(_SEPARATOR) + block.length() for block in blocks)


def _share_room(values: list[_Value], room: int) -> None:
    """Give ``values`` previews whose encodings total at most ``room``, as evenly as possible.

    Smallest first: room a value cannot use (an escape that does not fit, a
    value shorter than its share) passes on to the larger ones after it.
    """
    ordered = sorted(values, key=lambda value: len(value.whole))
    for position, value in enumerate(ordered):
        share = room // (len(ordered) - position)
        if len(value.whole) <= share:
            value.keep_whole()
        else:
            value.cut_to(share)
        room -= len(value.encoded)


def _fit_by_cutting(blocks: list[_RenderedBlock], key: str, overflow: int) -> bool:
    """Cut the fewest, largest values named ``key`` to save ``overflow`` characters; False when it cannot.

    On False every such value that can shrink is left at the minimal preview.
    Each cut updates the overflow by its own block's change in length, so the
    work is one sort and then constant per value, whatever the number of blocks.
    """
    ranked = sorted(
        ((value, block) for block in blocks for value in block.values if value.key == key and value.can_shrink),
        key=lambda pair: len(pair[0].whole),
        reverse=True,
    )
    for count, (value, block) in enumerate(ranked, start=1):
        before = block.length()
        value.cut_to(len(MINIMAL_PREVIEW))
        overflow += block.length() - before
        if overflow <= 0:
            chosen = [value for value, _ in ranked[:count]]
            _share_room(chosen, sum(len(value.encoded) for value in chosen) - overflow)
            return True
    return False


def _fit(summary: str, blocks: list[_RenderedBlock], max_chars: int) -> None:
    """Cut values of ``blocks`` so the text fits ``max_chars``; when it cannot, leave the minimal rendering."""
    for key in ("result", "error"):  # errors are cut only when cutting results is not enough
        overflow = _length(summary, blocks) - max_chars
        if overflow <= 0 or _fit_by_cutting(blocks, key, overflow):
            return


def _left_out_line(count: int, first: int, last: int, max_chars: int) -> str:
    """The last line of a text that shows no outcome for ``count`` blocks, numbered ``first`` to ``last``."""
    within = f"to keep this message within {max_chars} characters."
    if count == 1:
        return f"Left out: the outcome of block {first}, {within}"
    return f"Left out: the outcomes of blocks {first} to {last} ({count} blocks), {within}"


def _prefix_count(summary: str, blocks: list[_RenderedBlock], max_chars: int, *, preview: int) -> int:
    """How many blocks, from the first, fit with values cut to ``preview`` and the left-out line after them."""
    last = blocks[-1].block
    length, shown = len(summary), 0
    for count, block in enumerate(blocks):  # showing the ``count`` blocks before this one
        if length > max_chars:
            break
        left_out = _left_out_line(len(blocks) - count, block.block, last, max_chars)
        if length + len(_SEPARATOR) + len(left_out) <= max_chars:
            shown = count
        length += len(_SEPARATOR) + block.length_at_most(preview)
    return shown


def _cut(text: str, max_chars: int) -> str:
    """``text``, or its beginning and "…" in ``max_chars`` characters when it is longer."""
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1] + ELLIPSIS if max_chars > 0 else ""


def _render_leaving_out(summary: str, blocks: list[_RenderedBlock], max_chars: int) -> str:
    """The text when not even the minimal rendering of every block fits: the first blocks, a line for the rest."""
    last = blocks[-1].block
    # Blocks are left out anyway, so a few more are, to give the ones shown values
    # that say something the AI can act on rather than a bare "…" each.
    shown = _prefix_count(summary, blocks, max_chars, preview=PREVIEW_WHEN_LEAVING_OUT)
    if shown:
        kept = blocks[:shown]
        for block in kept:
            block.cut_values_to(PREVIEW_WHEN_LEAVING_OUT)  # fits: _prefix_count measured them so
        left_out = _left_out_line(len(blocks) - shown, blocks[shown].block, last, max_chars)
    else:
        # Not one block fits so: show as many as fit at all, sharing the room as usual.
        shown = _prefix_count(summary, blocks, max_chars, preview=len(MINIMAL_PREVIEW))
        kept = blocks[:shown]
        left_out = _left_out_line(len(blocks) - shown, blocks[shown].block, last, max_chars)
        _fit(summary, kept, max_chars - len(_SEPARATOR) - len(left_out))
    if not kept:
        return _cut(_SEPARATOR.join([summary, left_out]), max_chars)
    return _SEPARATOR.join([summary, *(block.text() for block in kept), left_out])


def render_results(outcomes: Sequence[BlockOutcome], *, max_chars: int) -> str:
    """The message reporting ``outcomes``, never longer than ``max_chars`` characters.

    See the module docstring for the layout, how values are cut and, when
    even that is not enough, how blocks are left out. With no outcomes, a
    one-line notice is returned (cut to ``max_chars``).
    """
    if not outcomes:
        return _cut(NO_BLOCKS, max_chars)
    ordered = sorted(outcomes, key=lambda outcome: outcome.block)
    summary = _summary(ordered)
    blocks = [_RenderedBlock(outcome) for outcome in ordered]
    minimal = len(summary) + sum(len(_SEPARATOR) + block.length_at_most(len(MINIMAL_PREVIEW)) for block in blocks)
    if minimal > max_chars:
        return _render_leaving_out(summary, blocks, max_chars)
    _fit(summary, blocks, max_chars)
    return _SEPARATOR.join([summary, *(block.text() for block in blocks)])


def parse_results(text: str) -> list[dict[str, Any]]:
    """The JSON of every ``baa-result`` block in ``text``, in order.

    Raises ``json.JSONDecodeError`` when a block does not hold valid JSON.
    """
    normalized = text.replace("\r\n", "\n").replace("\r", "\n")
    return [json.loads(match["body"]) for match in _RESULT_BLOCK_RE.finditer(normalized)]
