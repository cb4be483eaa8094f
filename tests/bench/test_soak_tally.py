"""The soak's verdict: what counts as lost, duplicated or stray, from what its plugins saw."""

import pytest

from bench.soak_tally import Delivery, tag_of, tags_in, tally

A, B, C = tag_of(0, 0), tag_of(0, 1), tag_of(1, 0)
SENT = {A: 1.0, B: 2.0, C: 3.0}


def test_every_message_stored_and_delivered_once_passes_with_each_latency():
    result = tally(SENT, {A, B, C}, [Delivery("t1", (A,), 1.5), Delivery("t2", (B,), 2.25),
                                     Delivery("t3", (C,), 3.125)], ran_twice=0)
    assert (result.sent, result.stored, result.deliveries, result.lost, result.duplicated) == (3, 3, 3, 0, 0)
    assert sorted(result.latencies_ms) == [125.0, 250.0, 500.0]
    assert not result.failed


def test_a_message_never_stored_and_one_never_delivered_are_lost():
    result = tally(SENT, {A, B, "soak-9-9"}, [Delivery("t1", (A,), 1.5)], ran_twice=0)
    assert result.unstored == (C,)
    assert result.undelivered == (B,)
    assert (result.stored, result.lost, result.failed) == (2, 2, True)


def test_the_same_delivery_sent_again_is_resent_not_duplicated_and_its_latency_is_the_first():
    result = tally(SENT, {A, B, C}, [Delivery("t1", (A,), 1.5), Delivery("t1", (A,), 9.0),
                                     Delivery("t2", (B, C), 3.5)], ran_twice=0)
    assert (result.resent, result.duplicated, result.deliveries) == (1, 0, 3)
    assert sorted(result.latencies_ms) == [500.0, 500.0, 1500.0]
    assert not result.failed


def test_a_message_in_two_deliveries_is_delivered_twice():
    result = tally(SENT, {A, B, C}, [Delivery("t1", (A,), 1.5), Delivery("t2", (B,), 2.5),
                                     Delivery("t3", (C,), 3.5), Delivery("t4", (A, B), 4.0),
                                     Delivery("t5", (A,), 5.0)], ran_twice=0)
    assert result.delivered_twice == (A, A, B)
    assert (result.duplicated, result.lost, result.failed) == (3, 0, True)
    assert sorted(result.latencies_ms) == [500.0, 500.0, 500.0]  # the first delivery counts


def test_an_instruction_run_twice_is_duplicated():
    result = tally(SENT, {A, B, C}, [Delivery("t", (A, B, C), 4.0)], ran_twice=1)
    assert (result.duplicated, result.failed) == (1, True)


def test_a_delivery_naming_no_message_sent_is_stray():
    result = tally(SENT, {A, B, C}, [Delivery("t", (A, B, C), 4.0), Delivery("u", ("soak-7-7",), 5.0),
                                     Delivery("v", (), 6.0)], ran_twice=0)
    assert (result.stray, result.lost, result.duplicated, result.failed) == (2, 0, 0, True)


@pytest.mark.parametrize(
    "text,tags",
    [
        ('✓ block 1 echo: {"n": 4, "tag": "soak-1-4"}', ("soak-1-4",)),
        ("soak-1-23 then soak-1-2, soak-1-23 again", ("soak-1-23", "soak-1-2")),
        ("soak-1- soak-x-1 nothing", ()),
    ],
)
def test_tags_in_a_delivered_text(text, tags):
    assert tags_in(text) == tags
