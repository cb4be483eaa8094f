"""The scale phase's pure parts: its steps, its send schedule, its line (as `make bench` reads it)
and its chart."""

import pytest

from bench.goals import POSTGRES, fields, rows
from bench.scale import Step, chart, first_send_offsets, steps_of


@pytest.mark.parametrize(
    "text,counts",
    [
        ("50,200,500,1000", [50, 200, 500, 1000]),
        ("200, 50,50", [50, 200]),  # ascending, each once
        ("0", []),  # no scale phase
        ("20,0,", [20]),
    ],
)
def test_steps_of(text, counts):
    assert steps_of(text) == counts


def test_steps_of_refuses_a_negative_count():
    with pytest.raises(ValueError):
        steps_of("50,-1")


def test_first_sends_spread_evenly_over_one_interval():
    assert first_send_offsets(4, 10.0) == [0.0, 2.5, 5.0, 7.5]


def step(plugins: int, latencies: list[float]) -> Step:
    return Step(plugins=plugins, seconds=60.0, sent=len(latencies) + 1, latencies=latencies, cpu_percent=12.34,
                rss_peak_bytes=123_456_789)


def test_a_steps_line_carries_the_figures_the_goals_read():
    line = f"scale {step(1000, [float(n) for n in range(1, 101)]).figures()}"
    figures = fields(line)

    assert (figures["plugins"], figures["median"], figures["p99"], figures["max"]) == ("1000", "50", "99", "100")
    assert (figures["sent"], figures["delivered"], figures["undelivered"]) == ("101", "100", "1")
    assert (figures["asgi_cpu_percent"], figures["asgi_rss_peak_mb"], figures["messages_per_s"]) == (
        "12.3", "123", "1.7")
    assert figures["servers"] == "1"
    # A run with one server only has no scale_one line: that row is not measured.
    assert [row.figure for row in rows({POSTGRES: {"scale": line}}) if row.goal == "7 scale"] == ["99 ms", "-", "123 MB"]


def test_a_step_with_nothing_delivered_has_no_latency():
    figures = fields(f"scale {step(50, []).figures()}")

    assert (figures["p99"], figures["delivered"]) == ("none", "0")


def test_chart_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="in the bench dependency group")
    path = chart([step(50, [10.0, 20.0]), step(200, [30.0, 80.0]), step(500, [])], tmp_path / "out" / "scale.png")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
