import random

import pytest

from automation.retry import RetryDelay, RetryPolicy, outbound_jitter_ms, retry_delay

BACKOFF = (5, 15, 45)


@pytest.mark.parametrize("attempts,backoff_ms", [(1, 5000), (2, 15000), (3, 45000), (4, 45000), (9, 45000)])
def test_backoff_follows_the_list_and_repeats_its_last_value(attempts, backoff_ms):
    delay = retry_delay(attempt_count=attempts, backoff_seconds=BACKOFF, jitter_max_ms=0, rng=random.Random(1))
    assert (delay.backoff_ms, delay.jitter_ms, delay.total_ms) == (backoff_ms, 0, backoff_ms)


def test_jitter_stays_within_its_bounds_and_covers_them():
    rng = random.Random(7)
    jitters = [
        retry_delay(attempt_count=1, backoff_seconds=BACKOFF, jitter_max_ms=1000, rng=rng).jitter_ms
        for _ in range(5000)
    ]
    assert min(jitters) >= 0 and max(jitters) <= 1000
    assert min(jitters) < 50 and max(jitters) > 950


def test_the_same_seed_gives_the_same_delays():
    def delays(seed):
        rng = random.Random(seed)
        return [retry_delay(attempt_count=n, backoff_seconds=BACKOFF, jitter_max_ms=1000, rng=rng) for n in (1, 2, 3)]

    assert delays(3) == delays(3)


def test_outbound_jitter_bounds():
    rng = random.Random(2)
    values = [outbound_jitter_ms(jitter_max_ms=800, rng=rng) for _ in range(3000)]
    assert 0 <= min(values) < 40 and 760 < max(values) <= 800
    assert outbound_jitter_ms(jitter_max_ms=0, rng=rng) == 0


def test_a_retry_follows_at_least_one_run():
    with pytest.raises(ValueError):
        retry_delay(attempt_count=0, backoff_seconds=BACKOFF, jitter_max_ms=0, rng=random.Random())


@pytest.mark.parametrize(
    ("attempt_count", "max_attempts", "delay"),
    [
        (1, 3, RetryDelay(backoff_ms=5000, jitter_ms=0)),
        (2, 3, RetryDelay(backoff_ms=15000, jitter_ms=0)),
        (3, 3, None),  # every attempt used: no retry
        (5, 3, None),
        (1, 1, None),
    ],
)
def test_the_retry_policy_gives_the_next_delay_while_attempts_remain(attempt_count, max_attempts, delay):
    policy = RetryPolicy(backoff_seconds=BACKOFF, jitter_max_ms=0, rng=random.Random(1))
    assert policy.next_delay(attempt_count=attempt_count, max_attempts=max_attempts) == delay
