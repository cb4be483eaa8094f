"""The goals ``make bench`` measures, and how a figure is judged against one: pure functions.

Each measurement of the bench prints one raw line: a tag, then ``key=value`` pairs, e.g.
``latency final_message_to_delivery_ms median=32 p99=80 max=95 messages=200``. A goal names
the tag and key of its figure and its target in each configuration; a relative target also
names the key of its peer's figure in the same line. ``rows`` reads the figures out of the
lines and judges them; ``table`` lays the rows out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

EMBEDDED = "embedded"  # SQLite, the channels_lite layer, django-q2's ORM broker
POSTGRES = "postgres+redis"
CONFIGURATIONS = (EMBEDDED, POSTGRES)

PASS, SHORT, NOT_MEASURED = "pass", "short", "not measured"

_FIELD = re.compile(r"(\S+?)=(\S+)")


@dataclass(frozen=True)
class Target:
    """The figure must be ``at_most`` or at least ``limit``; with ``peer`` (the key of the peer's
    figure), at least ``limit`` times the peer's figure."""

    limit: float
    at_most: bool = True
    peer: str | None = None

    def describe(self, unit: str) -> str:
        if self.peer:
            return f"≥ {self.limit:g} × peer"
        return f"{'≤' if self.at_most else '≥'} {self.limit:g} {unit}".rstrip()


def at_most(limit: float) -> Target:
    return Target(limit)


def at_least(limit: float, *, times: str | None = None) -> Target:
    """At least ``limit``, or with ``times``, at least ``limit`` times the figure of that key."""
    return Target(limit, at_most=False, peer=times)


def everywhere(target: Target) -> dict[str, Target]:
    return dict.fromkeys(CONFIGURATIONS, target)


@dataclass(frozen=True)
class Goal:
    """One row per configuration of ``targets``: ``measured`` (its ``{key}`` filled from the
    line) is the figure at ``key`` in the line tagged ``tag``, in ``unit``, judged by
    ``targets``. With ``at_scale`` (a key and a number), the figure only counts when the line's
    figure at that key reached the number: a short run's smaller scale leaves it not measured."""

    label: str
    measured: str
    tag: str
    key: str
    unit: str
    targets: Mapping[str, Target]
    decimals: int = 0
    peer_name: str = ""
    at_scale: tuple[str, float] | None = None


# The scale goal's number of plugins: a run with fewer leaves its rows not measured.
SCALE_PLUGINS = 1000

LATENCY_P50 = {EMBEDDED: at_most(50), POSTGRES: at_most(40)}
LATENCY_P99 = {EMBEDDED: at_most(150), POSTGRES: at_most(100)}

# The goals of the issue, on 2-core machines. Two ticks at the default CONDUCTOR_TICK_SECONDS
# of 2 s: a longer gap means the dispatcher missed a tick.
GOALS = (
    Goal("1 always awake", "longest gap between ticks over {over_s} s", "ticks", "longest_gap_s", "s",
         everywhere(at_most(4)), decimals=2),
    Goal("1+2 idle latency", "p50 of {messages} messages over {over_s} s", "idle_latency", "median", "ms",
         LATENCY_P50),
    Goal("1+2 idle latency", "p99 of {messages} messages over {over_s} s", "idle_latency", "p99", "ms",
         LATENCY_P99),
    Goal("2 latency", "p50 of {messages} messages", "latency", "median", "ms", LATENCY_P50),
    Goal("2 latency", "p99 of {messages} messages", "latency", "p99", "ms", LATENCY_P99),
    Goal("2 CPU per message", "ms of CPU of every serve process per message, {messages} messages", "latency_cpu",
         "ms_per_message", "ms", everywhere(at_most(15)), decimals=1),
    # The table: a team's plugins (one owner) at a steady rate, CPU per message delivered.
    Goal("2 CPU per message", "ms of CPU per message delivered, {plugins} plugins of one owner at {rate}/s", "cost", "ms_per_message", "ms", everywhere(at_most(15)), decimals=1),
    Goal("2 delivered under load", "not delivered within {within_s} s, of {sent} sent at {rate}/s", "cost",
         "undelivered", "", everywhere(at_most(0))),
    Goal("3 dispatcher capacity", "no-op tasks/s, {tasks} tasks (peer {q_tasks})", "capacity", "dispatcher",
         "tasks/s", everywhere(at_least(3, times="django_q2")), peer_name="django-q2"),
    Goal("4 ingest", "final messages/s, {messages} on one ASGI process", "ingest", "throughput", "messages/s",
         everywhere(at_least(500))),
    Goal("4 ingest", "acked but not stored, of {messages}", "ingest", "unstored", "", everywhere(at_most(0))),
    Goal("5 quiet at rest", "CPU of every serve process over {window_s} s", "quiet_at_rest", "cpu_percent",
         "% of a core", everywhere(at_most(2)), decimals=2),
    Goal("6 200 plugins", "ASGI peak resident memory, {count} plugins", "plugins", "asgi_rss_peak_mb", "MB",
         everywhere(at_most(150))),
    Goal("6 200 plugins", "ASGI CPU over {window_s} s, {count} plugins", "plugins", "asgi_cpu_percent",
         "% of a core", everywhere(at_most(5)), decimals=2),
    # The cost curve's largest step (bench/scale.py), on the deployment's configuration only.
    # With the most servers of the run (two, as two machines would run them) and with one: the
    # rows side by side say what a second server buys.
    Goal("7 scale", "p99 at {plugins} plugins on {servers} servers", "scale", "p99", "ms",
         {POSTGRES: at_most(250)}, at_scale=("plugins", SCALE_PLUGINS)),
    Goal("7 scale", "p99 at {plugins} plugins on {servers} server", "scale_one", "p99", "ms",
         {POSTGRES: at_most(250)}, at_scale=("plugins", SCALE_PLUGINS)),
    Goal("7 scale", "ASGI peak resident memory, {plugins} plugins on {servers} servers, each",
         "scale", "asgi_rss_peak_mb", "MB", {POSTGRES: at_most(300)}, at_scale=("plugins", SCALE_PLUGINS)),
)


@dataclass(frozen=True)
class Row:
    goal: str
    configuration: str
    measured: str
    figure: str
    peer: str
    target: str
    verdict: str


def fields(line: str) -> dict[str, str]:
    """The ``key=value`` pairs of a raw line."""
    return dict(_FIELD.findall(line))


def parse_figure(line: str | None, key: str) -> float | None:
    """The number at ``key`` in ``line``; None when the line or the key is missing or not a number."""
    if line is None:
        return None
    try:
        return float(fields(line)[key])
    except (KeyError, ValueError):
        return None


def judge(figure: float | None, target: Target, peer: float | None = None) -> str:
    """``pass`` when ``figure`` meets ``target``, ``short`` when it does not, ``not measured``
    when it (or the peer's figure a relative target needs) is missing."""
    if figure is None or (target.peer and peer is None):
        return NOT_MEASURED
    limit = target.limit * peer if target.peer else target.limit
    meets = figure <= limit if target.at_most else figure >= limit
    return PASS if meets else SHORT


def _describe(measured: str, line: str | None) -> str:
    known = fields(line) if line else {}
    return re.sub(r"\{(\w+)\}", lambda m: known.get(m.group(1), "?"), measured)


def rows(lines: Mapping[str, Mapping[str, str]], goals: Sequence[Goal] = GOALS) -> list[Row]:
    """One row per goal and configuration of ``lines`` (configuration → tag → raw line), goal by
    goal. A configuration that printed no line still has its rows (not measured); leave out one
    that was skipped. A goal without a target in a configuration has no row there."""
    result = []
    for goal in goals:
        for configuration, tagged in lines.items():
            if configuration not in goal.targets:
                continue
            line = tagged.get(goal.tag)
            target = goal.targets[configuration]
            figure = parse_figure(line, goal.key)
            if goal.at_scale and (parse_figure(line, goal.at_scale[0]) or 0) < goal.at_scale[1]:
                figure = None
            peer = parse_figure(line, target.peer) if target.peer else None
            target_text = target.describe(goal.unit)
            if target.peer and peer is not None:
                target_text += f" = {target.limit * peer:.{goal.decimals}f}"
            result.append(Row(
                goal=goal.label, configuration=configuration, measured=_describe(goal.measured, line),
                figure="-" if figure is None else f"{figure:.{goal.decimals}f} {goal.unit}".rstrip(),
                peer="" if not target.peer else f"{goal.peer_name} {'-' if peer is None else f'{peer:.{goal.decimals}f}'}",
                target=target_text, verdict=judge(figure, target, peer),
            ))
    return result


HEADER = Row("goal", "configuration", "measured", "figure", "peer", "target", "verdict")


def table(table_rows: Sequence[Row]) -> str:
    """The rows under a header, in columns two spaces apart."""
    cells = [list(vars(row).values()) for row in [HEADER, *table_rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(cells[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
