"""Text a database can store: no NUL, no lone surrogate.

PostgreSQL refuses a NUL in a text value (``DataError``), and a lone
surrogate (a valid Python string, decoded from a ``%ED%A0%80`` or a JSON
``"\\ud800"``) cannot be encoded as UTF-8 at all; SQLite stores the first and
fails on the second. Text that reaches a query from outside (a filter, a
search, a reason) is checked here first.
"""

from __future__ import annotations

import re

# NUL, and every UTF-16 surrogate: one in a Python ``str`` is always a lone one.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def is_storable(text: str) -> bool:
    return _UNSTORABLE.search(text) is None


def storable(text: str) -> str:
    """``text`` without the characters a database refuses."""
    return _UNSTORABLE.sub("", text)
