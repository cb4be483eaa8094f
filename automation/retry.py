"""Retry timing (SPEC §2.1, §4): pure, with the random source injected."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryDelay:
    backoff_ms: int
    jitter_ms: int

    @property
    def total_ms(self) -> int:
        return self.backoff_ms + self.jitter_ms


def retry_delay(
    *, attempt_count: int, backoff_seconds: tuple[int, ...], jitter_max_ms: int, rng: random.Random
) -> RetryDelay:
    """Delay before the next run after ``attempt_count`` runs failed.

    The first failure waits ``backoff_seconds[0]``, the second the next value,
    and the last value repeats beyond the list; plus a uniform jitter of
    ``0..jitter_max_ms`` milliseconds.
    """
    if attempt_count < 1:
        raise ValueError("a retry follows at least one run")
    step = min(attempt_count, len(backoff_seconds)) - 1
    return RetryDelay(backoff_ms=backoff_seconds[step] * 1000, jitter_ms=rng.randint(0, jitter_max_ms))


def outbound_jitter_ms(*, jitter_max_ms: int, rng: random.Random) -> int:
    """Uniform wait of ``0..jitter_max_ms`` before an outbound task (SPEC §4)."""
    return rng.randint(0, jitter_max_ms)
