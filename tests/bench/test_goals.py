"""`make bench` reads each figure out of its raw line and judges it against its goal."""

import pytest

from bench.goals import (
    EMBEDDED, GOALS, HEADER, NOT_MEASURED, PASS, POSTGRES, SHORT, Goal, at_least, at_most, everywhere, judge,
    parse_figure, rows, table,
)

LATENCY = "latency final_message_to_delivery_ms median=45 p99=120 max=130 messages=200"
CAPACITY = "capacity dispatcher=900 django_q2=250 tasks=300 per_tick=50 q_tasks=100"


@pytest.mark.parametrize(
    "line,key,figure",
    [
        (LATENCY, "median", 45.0),
        (LATENCY, "p99", 120.0),
        (CAPACITY, "django_q2", 250.0),
        ("ticks count=90 longest_gap_s=2.013 interval_s median=2.000", "longest_gap_s", 2.013),
        ("quiet_at_rest cpu_percent=-0.50", "cpu_percent", -0.5),
        (LATENCY, "p50", None),  # not in the line
        ("latency xmedian=45", "median", None),  # only whole keys count
        ("ingest throughput=fast", "throughput", None),  # not a number
        (None, "median", None),  # the line never came
    ],
)
def test_parse_figure(line, key, figure):
    assert parse_figure(line, key) == figure


@pytest.mark.parametrize(
    "figure,target,peer,verdict",
    [
        (40.0, at_most(40), None, PASS),  # the limit itself meets the goal
        (40.5, at_most(40), None, SHORT),
        (0.0, at_most(0), None, PASS),
        (500.0, at_least(500), None, PASS),
        (499.0, at_least(500), None, SHORT),
        (750.0, at_least(3, times="django_q2"), 250.0, PASS),
        (749.0, at_least(3, times="django_q2"), 250.0, SHORT),
        (None, at_most(40), None, NOT_MEASURED),
        (900.0, at_least(3, times="django_q2"), None, NOT_MEASURED),  # no peer to compare with
    ],
)
def test_judge(figure, target, peer, verdict):
    assert judge(figure, target, peer) == verdict


def test_each_configuration_is_judged_by_its_own_target():
    (p50, p99) = [goal for goal in GOALS if goal.tag == "latency"]
    judged = rows({EMBEDDED: {"latency": LATENCY}, POSTGRES: {"latency": LATENCY}}, goals=[p50, p99])

    assert [(row.configuration, row.figure, row.target, row.verdict) for row in judged] == [
        (EMBEDDED, "45 ms", "≤ 50 ms", PASS),
        (POSTGRES, "45 ms", "≤ 40 ms", SHORT),
        (EMBEDDED, "120 ms", "≤ 150 ms", PASS),
        (POSTGRES, "120 ms", "≤ 100 ms", SHORT),
    ]
    assert judged[0].measured == "p50 of 200 messages"


def test_a_relative_goal_shows_its_peer_and_the_limit_it_gives():
    (goal,) = [goal for goal in GOALS if goal.tag == "capacity"]
    (row,) = rows({EMBEDDED: {"capacity": CAPACITY}}, goals=[goal])

    assert (row.figure, row.peer, row.target, row.verdict) == (
        "900 tasks/s", "django-q2 250", "≥ 3 × peer = 750", PASS)


def test_a_missing_line_is_not_measured_and_a_skipped_configuration_has_no_row():
    goal = Goal("4 ingest", "final messages/s over {messages}", "ingest", "throughput", "messages/s",
                everywhere(at_least(500)))
    (row,) = rows({EMBEDDED: {"latency": LATENCY}}, goals=[goal])

    assert (row.configuration, row.measured, row.figure, row.verdict) == (
        EMBEDDED, "final messages/s over ?", "-", NOT_MEASURED)


def test_every_goal_has_a_target_in_postgres_and_the_scale_goal_only_there():
    for goal in GOALS:
        expected = {POSTGRES} if goal.tag.startswith("scale") else {EMBEDDED, POSTGRES}
        assert set(goal.targets) == expected, goal.label


SCALE = ("{tag} servers={servers} plugins={plugins} window_s=60.0 sent=6000 delivered=6000 undelivered=0 "
         "messages_per_s=100.0 final_message_to_delivery_ms median=90 p99={p99} max=400 asgi_cpu_percent=35.0 "
         "asgi_rss_peak_mb=280 errors=0")


def test_the_scale_goals_are_judged_on_postgres_at_a_thousand_plugins_on_two_servers_and_on_one():
    goals = [goal for goal in GOALS if goal.tag.startswith("scale")]
    judged = rows({EMBEDDED: {}, POSTGRES: {
        "scale": SCALE.format(tag="scale", servers=2, plugins=1000, p99=240),
        "scale_one": SCALE.format(tag="scale_one", servers=1, plugins=1000, p99=900),
    }}, goals=goals)

    assert [(row.configuration, row.measured, row.figure, row.target, row.verdict) for row in judged] == [
        (POSTGRES, "p99 at 1000 plugins on 2 servers", "240 ms", "≤ 250 ms", PASS),
        (POSTGRES, "p99 at 1000 plugins on 1 server", "900 ms", "≤ 250 ms", SHORT),
        (POSTGRES, "ASGI peak resident memory, 1000 plugins on 2 servers, each", "280 MB", "≤ 300 MB", PASS),
    ]


def test_a_scale_run_short_of_a_thousand_plugins_is_not_measured():
    goals = [goal for goal in GOALS if goal.tag == "scale"]
    judged = rows({POSTGRES: {"scale": SCALE.format(tag="scale", servers=2, plugins=50, p99=240)}}, goals=goals)

    assert [(row.measured, row.verdict) for row in judged] == [
        ("p99 at 50 plugins on 2 servers", NOT_MEASURED),
        ("ASGI peak resident memory, 50 plugins on 2 servers, each", NOT_MEASURED),
    ]


def test_table_lines_up_its_columns_under_a_header():
    judged = rows({EMBEDDED: {"latency": LATENCY, "capacity": CAPACITY}, POSTGRES: {}})
    lines = table(judged).splitlines()

    per_configuration = sum(len(goal.targets) for goal in GOALS)
    assert len(lines) == 2 + per_configuration
    assert lines[0].split() == ["goal", "configuration", "measured", "figure", "peer", "target", "verdict"]
    assert set(lines[1]) == {"-", " "}
    verdict_at = lines[0].index(HEADER.verdict)
    assert [line[verdict_at:] for line in lines[2:]] == [row.verdict for row in judged]
    assert {row.verdict for row in judged} == {PASS, NOT_MEASURED}


def test_a_peer_that_did_nothing_in_time_leaves_the_goal_not_measured():
    (goal,) = [goal for goal in GOALS if goal.tag == "capacity"]
    line = "capacity dispatcher=14 django_q2=none tasks=93 per_tick=50 q_tasks=0"
    (row,) = rows({POSTGRES: {"capacity": line}}, goals=[goal])

    assert (row.peer, row.target, row.verdict) == ("django-q2 -", "≥ 3 × peer", NOT_MEASURED)
