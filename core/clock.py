"""Time as integer milliseconds since the Unix epoch, for every app.

Services take ``now`` as an argument and fall back to ``now_ms()``, so tests
and the dispatcher drive time instead of sleeping (STYLE rule 8).
"""

import datetime as dt
import threading
import time

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ms_from_datetime(moment: dt.datetime) -> int:
    """An aware datetime as epoch milliseconds.

    Exact integer arithmetic: a float timestamp could round one moment
    differently from one call to the next (renewal dedupe keys rely on it).
    """
    return (moment - EPOCH) // dt.timedelta(milliseconds=1)


def datetime_from_ms(ms: int) -> dt.datetime:
    """Epoch milliseconds as an aware datetime in UTC."""
    return EPOCH + dt.timedelta(milliseconds=ms)


_sequence_lock = threading.Lock()
_sequence_last = 0


def sequence_next() -> int:
    """A creation-order number: wall-clock nanoseconds, strictly increasing in this process.

    Tasks of one conversation are created under that conversation's lock, so
    their numbers follow creation order across processes too.
    """
    global _sequence_last
    with _sequence_lock:
        _sequence_last = max(time.time_ns(), _sequence_last + 1)
        return _sequence_last
