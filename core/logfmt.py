"""One structured log line per event (STYLE rule 11).

Lines are logfmt (``key=value`` pairs with stable keys); the same fields ride
along in ``extra["fields"]`` for handlers that emit JSON. Values often come
from a plugin or a page, so each is bounded to ``MAX_VALUE_CHARS`` and
written with its control characters escaped: one event stays one short line.
"""

import json
import logging
import time
from collections.abc import Callable
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


def event_line(action: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    """The logfmt line of ``action`` and the non-None ``fields``, and the fields as logged."""
    present = {"action": action, **{key: _bounded(value) for key, value in fields.items() if value is not None}}
    return " ".join(f"{key}={_format_value(value)}" for key, value in present.items()), present


def log_event(
    logger: logging.Logger, action: str, *, level: int = logging.INFO, exc_info: bool = False, **fields: Any
) -> None:
    """Log ``action`` and the non-None ``fields`` as one logfmt line, each value bounded.

    ``exc_info``: the exception being handled follows the line (its traceback):
    for failures that are bugs or lost services, not for expected refusals.
    """
    if not logger.isEnabledFor(level):
        return  # formatting the line is most of its cost
    line, present = event_line(action, **fields)
    logger.log(level, line, exc_info=exc_info, extra={"fields": present})


class OneLineRefusals(logging.Filter):
    """Rewrites the request logger's record of a refused request (a 4xx) as one event line.

    Django logs a ``PermissionDenied`` (403) or an ``Http404`` with its
    traceback: some 50 lines for what is an expected answer, which a
    signed-in user could repeat to flood the log. The record keeps its level
    and becomes ``action=permission_denied`` (403) or ``action=request_refused``
    with the status, method, path, user and reason. Server errors (5xx) keep
    their traceback: those are bugs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        # Already rewritten: logging configured twice adds the filter twice.
        if not isinstance(status, int) or not 400 <= status < 500 or hasattr(record, "fields"):
            return True
        request = getattr(record, "request", None)
        user = getattr(request, "user", None)
        reason = record.exc_info[1] if record.exc_info else None
        line, present = event_line(
            "permission_denied" if status == 403 else "request_refused",
            status=status,
            method=getattr(request, "method", None),
            path=getattr(request, "path", None),
            user=user.get_username() if getattr(user, "is_authenticated", False) else None,
            reason=(str(reason) or type(reason).__name__) if reason is not None else None,
        )
        record.msg, record.args, record.fields = line, (), present
        record.exc_info = record.exc_text = None
        return True


class CountedLines:
    """When to log an event that may come in floods: the first at once, then at most once per ``interval`` seconds.

    ``add`` counts occurrences and returns the count to put in the line when
    one is due (every occurrence since the last line, itself included), else
    None: a flood costs a counter, and the log gets one line a minute.
    """

    def __init__(self, interval: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.pending = 0  # counted since the last line
        self._logged_at: float | None = None

    def add(self, count: int = 1) -> int | None:
        self.pending += count
        now = self.clock()
        if self._logged_at is not None and now - self._logged_at < self.interval:
            return None
        due, self.pending, self._logged_at = self.pending, 0, now
        return due


class OneLineForeignTasks(logging.Filter):
    """django-q2's record of a queued task it cannot verify, as one line a minute instead of a traceback each.

    A cluster's pusher logs "Failed to push task to queue" with the
    ``BadSignature`` traceback for every task signed with another
    ``SECRET_KEY`` (a server of this installation started with a key of its
    own, ``core.keys``), and drops the task. The first such record becomes
    ``action=queue_task_refused`` with how many were refused since the last
    line; the others within the minute are dropped. Other records pass as
    they are.
    """

    def __init__(self, name: str = "", *, interval: float = 60.0) -> None:
        super().__init__(name)
        self._lines = CountedLines(interval)

    def filter(self, record: logging.LogRecord) -> bool:
        from django.core.signing import BadSignature

        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, BadSignature) or hasattr(record, "fields"):
            return True
        count = self._lines.add()
        if count is None:
            return False
        line, present = event_line(
            "queue_task_refused", tasks=count, reason=f"{type(error).__name__}: {error}",
            detail="a task signed with another SECRET_KEY (is a server of this installation started with a key "
            "of its own?); django-q2 dropped it",
        )
        record.msg, record.args, record.fields = line, (), present
        record.exc_info = record.exc_text = None
        return True
