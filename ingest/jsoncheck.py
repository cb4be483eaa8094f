"""Decoding JSON that a plugin, a page or an assistant wrote. Pure.

``json.loads`` accepts more than Conductor can store or answer safely:
``NaN``, ``Infinity`` and ``1e999`` (not JSON, and refused by PostgreSQL's
``jsonb``), integers of thousands of digits (Python refuses to convert more
than 4,300 and raises a plain ``ValueError``), nesting deep enough to raise
``RecursionError``, ``"\\ud800"``: a lone surrogate, which no UTF-8 text
can hold, and ``"\\u0000"``: a NUL, which PostgreSQL's text and ``jsonb``
refuse (a message holding one could never be stored there). ``loads_checked``
refuses each with a ``JsonRefused`` that says what was wrong, in work linear
in the text's size.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 100
MAX_NUMBER_DIGITS = 100

_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonRefused(ValueError):
    """JSON Conductor does not take.

    ``is_malformed`` is True for input no sane encoder writes (too deep, a
    number too long: ``bad_frame`` on the socket), False for a value that is
    well formed but cannot be stored (a non-finite number, a lone surrogate:
    ``invalid``).
    """

    def __init__(self, detail: str, *, is_malformed: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.is_malformed = is_malformed


def has_lone_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def _digits(literal: str) -> int:
    # A JSON number literal holds digits and at most these others.
    return len(literal) - sum(literal.count(char) for char in "-+.eE")


def _checked_int(literal: str) -> int:
    if _digits(literal) > MAX_NUMBER_DIGITS:
        raise JsonRefused(f"a number has more than {MAX_NUMBER_DIGITS} digits", is_malformed=True)
    return int(literal)


def _checked_float(literal: str) -> float:
    if _digits(literal) > MAX_NUMBER_DIGITS:
        raise JsonRefused(f"a number has more than {MAX_NUMBER_DIGITS} digits", is_malformed=True)
    value = float(literal)
    if not math.isfinite(value):
        raise JsonRefused(
            f"{literal[:30]} is not a finite number; write a finite number or a string", is_malformed=False
        )
    return value


def _non_finite(name: str) -> Any:
    raise JsonRefused(f"{name} is not a number JSON allows; write a finite number or a string", is_malformed=False)


def _check_tree(value: Any, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth`` and strings holding a lone surrogate or a NUL; iterative."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                raise JsonRefused("a string holds a lone surrogate (an unpaired \\ud800-\\udfff escape)",
                                  is_malformed=False)
            if "\0" in item:
                raise JsonRefused("a string holds a NUL character (a \\u0000 escape)", is_malformed=False)
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise JsonRefused(f"nested deeper than {max_depth} levels", is_malformed=True)
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


def loads_checked(
    text: str,
    *,
    max_depth: int = MAX_DEPTH,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """Decode ``text``; raises ``json.JSONDecodeError`` for broken JSON and ``JsonRefused`` as above."""
    try:
        value = json.loads(
            text,
            parse_int=_checked_int,
            parse_float=_checked_float,
            parse_constant=_non_finite,
            object_pairs_hook=object_pairs_hook,
        )
    except RecursionError:
        raise JsonRefused(f"nested deeper than {max_depth} levels", is_malformed=True) from None
    _check_tree(value, max_depth)
    return value
