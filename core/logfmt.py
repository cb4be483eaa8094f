"""One structured log line per event (STYLE rule 11).

Lines are logfmt (``key=value`` pairs with stable keys); the same fields ride
along in ``extra["fields"]`` for handlers that emit JSON. Values often come
from a plugin or a page, so each is bounded to ``MAX_VALUE_CHARS`` and
written with its control characters escaped: one event stays one short line.
"""

import json
import logging
from typing import Any

MAX_VALUE_CHARS = 200


def _bounded(value: Any) -> Any:
    """``value``, with a string cut to ``MAX_VALUE_CHARS`` and the cut said."""
    if not isinstance(value, str):
        text = json.dumps(value, default=str)
        if len(text) <= MAX_VALUE_CHARS:
            return value
        value = text
    if len(value) <= MAX_VALUE_CHARS:
        return value
    return f"{value[:MAX_VALUE_CHARS]}...(+{len(value) - MAX_VALUE_CHARS} chars)"


def _format_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or not text.isprintable() or any(ch.isspace() or ch in '"=\\' for ch in text):
        # JSON escapes control characters, quotes and lone surrogates; DEL is
        # the one control character it leaves as it is.
        return json.dumps(text).replace("\x7f", "\\u007f")
    return text


def log_event(logger: logging.Logger, action: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``action`` and the non-None ``fields`` as one logfmt line, each value bounded."""
    if not logger.isEnabledFor(level):
        return  # formatting the line is most of its cost
    present = {"action": action, **{key: _bounded(value) for key, value in fields.items() if value is not None}}
    line = " ".join(f"{key}={_format_value(value)}" for key, value in present.items())
    logger.log(level, line, extra={"fields": present})
