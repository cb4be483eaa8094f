"""Retry timing (SPEC §2.1, §4): pure, with the random source injected."""

from __future__ import annotations

import random
from dataclasses import dataclass


# A task waiting for a part of the server (SPEC §4) is tried again after as long as it has
# waited so far, within these bounds, plus the retry jitter.
PART_AWAY_FIRST_DELAY_MS = 5_000
PART_AWAY_MAX_DELAY_MS = 60_000


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


@dataclass(frozen=True)
class RetryPolicy:
    """The one place that decides whether a failed or interrupted run is tried again, and when.

    Built from the dispatcher's config; the dispatcher and the reclaim of
    expired leases both ask it, and the transitions only assert its answer.
    """

    backoff_seconds: tuple[int, ...]
    jitter_max_ms: int
    rng: random.Random

    def next_delay(self, *, attempt_count: int, max_attempts: int) -> RetryDelay | None:
        """The wait before the next run after ``attempt_count`` runs; None when none is left."""
        if attempt_count >= max_attempts:
            return None
        return retry_delay(
            attempt_count=attempt_count, backoff_seconds=self.backoff_seconds,
            jitter_max_ms=self.jitter_max_ms, rng=self.rng,
        )

    def part_away_delay(self, *, waited_ms: int) -> RetryDelay:
        """The wait before trying again a task that has waited ``waited_ms`` for a part of the server."""
        backoff = min(PART_AWAY_MAX_DELAY_MS, max(PART_AWAY_FIRST_DELAY_MS, waited_ms))
        return RetryDelay(backoff_ms=backoff, jitter_ms=self.rng.randint(0, self.jitter_max_ms))
