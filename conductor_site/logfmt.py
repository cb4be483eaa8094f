"""One structured log line per event (STYLE rule 11).

Lines are logfmt (``key=value`` pairs with stable keys); the same fields ride
along in ``extra["fields"]`` for handlers that emit JSON.
"""

import json
import logging
from typing import Any


def _format_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or any(ch.isspace() or ch in '"=' for ch in text):
        return json.dumps(text)
    return text


def log_event(logger: logging.Logger, action: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``action`` and the non-None ``fields`` as one logfmt line."""
    present = {"action": action, **{key: value for key, value in fields.items() if value is not None}}
    line = " ".join(f"{key}={_format_value(value)}" for key, value in present.items())
    logger.log(level, line, extra={"fields": present})
