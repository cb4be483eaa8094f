"""What of a tool's result is stored (``result_json``): pure, no I/O.

A result's JSON is what the task keeps, what the admin's pages show and what
the delivery renders, so one huge result (a command's output, an MCP tool's
text) would cost its size in the database, on every page that shows the
task, and at every later read. A result whose JSON is larger than
``CONDUCTOR_RESULT_STORE_MAX_BYTES`` is stored instead as a **cut result**::

    {"result_cut": true, "result_bytes": 39420935, "max_bytes": 1048576,
     "preview": "{\\"path\\": \\"big.bin\\", \\"text\\": \\"..."}

``result_bytes`` is the size of the whole result's JSON, ``preview`` the
beginning of that JSON text, as long as fits. Its first members say what
happened, so the delivered text, which renders the stored result as it is
(and shortens it further when the message needs it), tells the chat that the
result was cut and how large it was.
"""

from __future__ import annotations

import json
from typing import Any

ELLIPSIS = "…"


def _stored_text(value: Any) -> str:
    # As the transitions store a result: json.dumps with its defaults (ASCII).
    return json.dumps(value)


def cut_result(*, result_bytes: int, max_bytes: int, preview: str) -> dict[str, Any]:
    return {"result_cut": True, "result_bytes": result_bytes, "max_bytes": max_bytes, "preview": preview}


def is_cut_result(value: Any) -> bool:
    return isinstance(value, dict) and value.get("result_cut") is True and "result_bytes" in value


def result_for_storage(result: Any, *, max_bytes: int) -> Any:
    """``result`` when its stored JSON takes at most ``max_bytes`` bytes; otherwise its cut result, within them.

    A value ``json.dumps`` cannot write (a tool's bug) is stored as its
    ``repr``, under the same bound, rather than failing the task's
    transition.
    """
    try:
        text = _stored_text(result)
    except (TypeError, ValueError, RecursionError):
        text = _stored_text(repr(result))
        result = repr(result)
    if len(text) <= max_bytes:  # ASCII: characters are bytes
        return result
    empty = _stored_text(cut_result(result_bytes=len(text), max_bytes=max_bytes, preview=""))
    room = max_bytes - len(empty)
    # The longest beginning of the text whose own JSON fits the room: each
    # character takes at least one byte there, so no more than ``room`` fit.
    low, high = 0, max(0, min(len(text), room))
    while low < high:
        middle = (low + high + 1) // 2
        if len(_stored_text(text[:middle] + ELLIPSIS)) - 2 <= room:
            low = middle
        else:
            high = middle - 1
    preview = text[:low] + ELLIPSIS if low else ""
    return cut_result(result_bytes=len(text), max_bytes=max_bytes, preview=preview)
