"""The cost phase's pure parts: its line (as `make bench` reads it, dividing by the messages
delivered) and its process roles."""

import os

import pytest

from bench.cost import Cost, role_of
from bench.goals import EMBEDDED, GOALS, PASS, POSTGRES, SHORT, fields, rows


def cost(*, delivered: int, database=None, latencies=None) -> Cost:
    return Cost(plugins=20, rate=10.0, sent=400, delivered=delivered, within_s=60.0, window_s=41.234,
                latencies_ms=[float(n) for n in range(1, 101)] if latencies is None else latencies,
                cpu_by_role={"daphne": 2.0, "dispatcher": 3.6, "cluster": 0.4, "serve": 0.0}, database=database)


def test_the_line_divides_by_the_messages_delivered():
    figures = fields(cost(delivered=400, database=(11_400, 791_600)).line())

    assert (figures["ms_per_message"], figures["cpu_s"]) == ("15.0", "6.00")
    assert (figures["daphne_ms"], figures["dispatcher_ms"], figures["cluster_ms"], figures["serve_ms"]) == (
        "5.0", "9.0", "1.0", "0.0")
    assert (figures["xact_per_message"], figures["rows_fetched_per_message"]) == ("28.5", "1979")
    assert (figures["median"], figures["p99"], figures["max"]) == ("50", "99", "100")
    assert (figures["sent"], figures["delivered"], figures["undelivered"], figures["within_s"]) == (
        "400", "400", "0", "60")


def test_on_sqlite_the_line_has_no_database_counts_and_nothing_delivered_no_latency():
    figures = fields(cost(delivered=0, latencies=[]).line())

    assert "xact_per_message" not in figures
    assert (figures["p99"], figures["undelivered"], figures["ms_per_message"]) == ("none", "400", "6000.0")


def test_the_cost_goals_read_cpu_per_message_and_what_was_not_delivered():
    goals = [goal for goal in GOALS if goal.tag == "cost"]
    judged = rows({EMBEDDED: {"cost": cost(delivered=381).line()}, POSTGRES: {"cost": cost(delivered=400).line()}},
                  goals=goals)

    assert [(row.configuration, row.figure, row.target, row.verdict) for row in judged] == [
        (EMBEDDED, "15.7 ms", "≤ 15 ms", SHORT),
        (POSTGRES, "15.0 ms", "≤ 15 ms", PASS),
        (EMBEDDED, "19", "≤ 0", SHORT),
        (POSTGRES, "0", "≤ 0", PASS),
    ]
    assert judged[0].measured == "ms of CPU per message delivered, 20 plugins of one owner at 10/s"


def test_the_server_itself_is_serve_and_a_process_gone_has_ended():
    assert role_of(os.getpid(), os.getpid()) == "serve"
    assert role_of(2**22 + 1, os.getpid()) == "ended"  # above the kernel's largest pid
