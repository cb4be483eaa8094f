"""What /metrics reports, in Prometheus' text format.

Every figure is read from the database when Prometheus scrapes, by the
apps' selectors: Conductor runs as several processes (ASGI servers,
django-q2 clusters), so a counter kept in one process's memory would see
only that process's share. The collector is registered on a registry of
our own, not prometheus_client's global one, so the client's process and
platform collectors (this process only) stay out. A scrape costs one
aggregated query per family (ten), whatever the number of rows, and one
bounded read of the tasks finished in the last hour for the three duration
histograms. Those histograms describe that window, recomputed at each scrape
from the tasks' times, so every server reports the same figures: an
in-process histogram would only see the runs of its own process (the
dispatcher runs in django-q2 clusters, not in the servers Prometheus scrapes).

Every count is a gauge, counts of rows included: ``prune`` deletes
finished tasks with their events and delivery requests, and old messages
with their instructions, once a day, so a count of rows falls then.
Exposed as a counter, that fall would read as a counter reset, and
``rate()`` or ``increase()`` would count every row still kept as new.
As gauges, ``delta()`` over a window without a prune gives what happened
in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from automation.kinds import kinds
from automation.models import Outcome, TaskStatus, task_outcome
from automation.selectors import (
    DURATION_WINDOW_MS,
    TaskTimes,
    dispatcher_heartbeat_age_seconds,
    lease_losses_by_kind,
    task_counts_by_kind_status_and_outcome,
    task_event_counts,
    task_times_finished_since,
)
from automation.services.transitions import (
    LEASE,
    RECLAIM_TO_FAILED,
    RECLAIM_TO_RETRY,
    RECLAIM_UNSTARTED,
)
from conversations.models import Message
from conversations.selectors import message_counts_by_source_and_role
from core.clock import now_ms
from core.layer_send import channel_layer_error
from ingest.health import adapter_report_counts, capture_counts_by_platform
from ingest.models import AdapterReport, Instruction
from ingest.selectors.blocks import instruction_counts_by_status
from ingest.selectors.clients import plugin_clients_connected
from ingest.selectors.deliveries import DeliveryState, delivery_request_counts
from pipelines.delivery_methods import delivery_methods
from platforms import platforms

# The statuses a reclaim puts a task in whose lease expired.
RECLAIMED_STATUSES = tuple(
    edge.to_status for edge in (RECLAIM_UNSTARTED, RECLAIM_TO_RETRY, RECLAIM_TO_FAILED)
)
RECLAIM_ACTION = RECLAIM_UNSTARTED.action

PRUNED = "Rows kept; prune deletes old ones (CONDUCTOR_RETENTION_DAYS), so it falls when prune runs."


class DeliveryOutcome(StrEnum):
    """How a delivery request ended, as the ``outcome`` label says it."""

    DELIVERED = "delivered"
    # The answer said the method cannot work here: the attempt moved on to the next method.
    FELL_THROUGH = "fell_through"
    FAILED = "failed"
    UNANSWERED = "unanswered"


def delivery_outcome(*, method: str, state: str, error_code: str | None) -> str:
    """The outcome of a request in ``state`` (a ``DeliveryState``), answered with ``error_code``.

    Whether an error code falls through is the method's own say
    (``DeliveryMethodSpec.falls_through_on``).
    """
    if state == DeliveryState.DELIVERED:
        return DeliveryOutcome.DELIVERED
    if state == DeliveryState.UNANSWERED:
        return DeliveryOutcome.UNANSWERED
    if (
        method in delivery_methods
        and error_code in delivery_methods.get(method).falls_through_on
    ):
        return DeliveryOutcome.FELL_THROUGH
    return DeliveryOutcome.FAILED


# Histogram buckets in seconds: the goals run from tens of milliseconds (a claim)
# to a minute (a delivery through a slow page).
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

WINDOWED = (
    "Over the tasks that finished in the last hour, read from the database at each scrape "
    "(the same on every server), so it is not a counter: use histogram_quantile() on the buckets "
    "without rate()."
)


def histogram_buckets(seconds: list[float]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative ``(le, count)`` buckets of ``seconds`` over DURATION_BUCKETS and +Inf, and their sum. Pure."""
    buckets = [(str(bound), float(sum(1 for value in seconds if value <= bound))) for bound in DURATION_BUCKETS]
    return [*buckets, ("+Inf", float(len(seconds)))], sum(seconds)


def task_durations(times: list[TaskTimes]) -> dict[str, dict[str, list[float]]]:
    """Seconds per measure and kind from finished tasks' times. Pure.

    ``queue_wait``: due -> started, of the last run; ``run``: started ->
    finished; ``message_to_done``: the source message's arrival -> success
    (for ``instruction.deliver``, final_message -> delivery).
    """
    measures: dict[str, dict[str, list[float]]] = {"queue_wait": {}, "run": {}, "message_to_done": {}}
    for task in times:
        if task.started is not None:
            measures["queue_wait"].setdefault(task.kind, []).append(max(0, task.started - task.due) / 1000)
            measures["run"].setdefault(task.kind, []).append(max(0, task.finished - task.started) / 1000)
        if task.status == TaskStatus.SUCCEEDED and task.message_at is not None:
            measures["message_to_done"].setdefault(task.kind, []).append(
                max(0, task.finished - task.message_at) / 1000
            )
    return measures


DURATION_FAMILIES = {
    "queue_wait": (
        "conductor_task_queue_wait_seconds",
        "Seconds from a task being due to its last run starting, by kind. ",
    ),
    "run": ("conductor_task_run_seconds", "Seconds a task's last run took, by kind. "),
    "message_to_done": (
        "conductor_task_message_to_done_seconds",
        "Seconds from the source message's arrival to the task's success, by kind "
        "(instruction.deliver: final_message to delivery). ",
    ),
}


class ConductorCollector(Collector):
    """Conductor's figures, read from the database at each scrape."""

    def collect(self) -> Iterator[Metric]:
        yield self._tasks()
        yield from self._durations()
        yield from self._lease_events()
        yield self._lease_losses()
        yield self._deliveries()
        yield self._messages()
        yield self._instructions()
        yield self._clients()
        yield self._dispatcher()
        yield self._parts()
        yield self._captures()
        yield self._adapter_reports()

    def _tasks(self) -> Metric:
        family = GaugeMetricFamily(
            "conductor_tasks",
            "Tasks by kind, status and reason: how a finished one ended (succeeded; fault or rejected "
            "for failed: an operator's or a policy's no is not a fault; cancelled), \"\" while open. "
            + PRUNED,
            labels=["kind", "status", "reason"],
        )
        counts = task_counts_by_kind_status_and_outcome()
        # Every status and reason of every known kind, zeros included, so that a
        # series does not vanish when its last task moves on.
        cells = [(status, task_outcome(status, None)) for status in TaskStatus.values]
        cells.append((TaskStatus.FAILED, Outcome.REJECTED))
        for kind in sorted(set(kinds.names()) | {kind for kind, _, _ in counts}):
            for status, reason in cells:
                family.add_metric([kind, status, reason], counts.get((kind, status, reason), 0))
        return family

    def _durations(self) -> Iterator[Metric]:
        measures = task_durations(task_times_finished_since(since_ms=now_ms() - DURATION_WINDOW_MS))
        for measure, (name, text) in DURATION_FAMILIES.items():
            family = HistogramMetricFamily(name, text + WINDOWED, labels=["kind"])
            for kind in sorted(set(kinds.names()) | measures[measure].keys()):
                buckets, total = histogram_buckets(measures[measure].get(kind, []))
                family.add_metric([kind], buckets, total)
            yield family

    def _lease_events(self) -> Iterator[Metric]:
        counts = task_event_counts(actions=[LEASE.action, RECLAIM_ACTION])
        claims = GaugeMetricFamily(
            "conductor_task_claims",
            "Leases the dispatcher took (claims), by task kind, from the tasks' events. "
            + PRUNED,
            labels=["kind"],
        )
        expiries = GaugeMetricFamily(
            "conductor_task_lease_expiries",
            "Tasks reclaimed after their lease expired, by task kind and the status they were put in "
            "(pending: never started; retry_wait or failed: interrupted while running). "
            + PRUNED,
            labels=["kind", "status"],
        )
        claimed: dict[str, int] = {}
        reclaimed: dict[tuple[str, str], int] = {}
        for (action, kind, status_to), n in counts.items():
            if action == LEASE.action:
                claimed[kind] = claimed.get(kind, 0) + n
            else:
                reclaimed[kind, status_to] = n
        known = set(kinds.names()) | claimed.keys() | {kind for kind, _ in reclaimed}
        for kind in sorted(known):
            claims.add_metric([kind], claimed.get(kind, 0))
            for status in RECLAIMED_STATUSES:
                expiries.add_metric([kind, status], reclaimed.get((kind, status), 0))
        yield claims
        yield expiries

    def _lease_losses(self) -> Metric:
        family = CounterMetricFamily(
            "conductor_leases_lost",
            "Times a worker found, at a write, that its lease no longer held its task (SPEC 4.4: a lease "
            "that expired under a live worker and was taken again), by task kind. An operator's cancel is "
            "not counted. A true counter, never pruned: 0 on a healthy system.",
            labels=["kind"],
        )
        losses = lease_losses_by_kind()
        for kind in sorted(set(kinds.names()) | losses.keys()):
            family.add_metric([kind], losses.get(kind, 0))
        return family

    def _deliveries(self) -> Metric:
        family = GaugeMetricFamily(
            "conductor_delivery_requests",
            "Delivery frames sent to plugin clients, by method and outcome "
            "(delivered, fell_through to the next method, failed, unanswered). "
            + PRUNED,
            labels=["method", "outcome"],
        )
        outcomes = {
            (method.name, outcome): 0
            for method in delivery_methods
            for outcome in DeliveryOutcome
        }
        for (method, state, error_code), n in delivery_request_counts().items():
            key = (
                method,
                delivery_outcome(method=method, state=state, error_code=error_code),
            )
            outcomes[key] = outcomes.get(key, 0) + n
        for (method, outcome), n in sorted(outcomes.items()):
            family.add_metric([method, outcome], n)
        return family

    def _messages(self) -> Metric:
        family = GaugeMetricFamily(
            "conductor_messages",
            "Messages stored, by source (plugin, replay, conductor) and role. "
            + PRUNED,
            labels=["source", "role"],
        )
        for (source, role), n in sorted(message_counts_by_source_and_role().items()):
            family.add_metric([source, role], n)
        return family

    def _instructions(self) -> Metric:
        family = GaugeMetricFamily(
            "conductor_instructions",
            "Instructions (blocks of assistant messages) by status. " + PRUNED,
            labels=["status"],
        )
        counts = instruction_counts_by_status()
        for status in sorted(set(Instruction.Status.values) | counts.keys()):
            family.add_metric([status], counts.get(status, 0))
        return family

    def _clients(self) -> Metric:
        return GaugeMetricFamily(
            "conductor_plugin_clients_connected",
            "Enabled plugin clients connected now (seen within the presence window).",
            value=plugin_clients_connected().count(),
        )

    def _dispatcher(self) -> Metric:
        family = GaugeMetricFamily(
            "conductor_dispatcher_last_tick_age_seconds",
            "Seconds since a dispatcher loop last beat (it beats after a tick, at most every half tick); "
            "no sample while no loop has a row.",
        )
        age = dispatcher_heartbeat_age_seconds(now_ms=now_ms())
        if age is not None:
            family.add_metric([], age)
        return family

    def _parts(self) -> Metric:
        """The server's parts as this server reaches them; the database answered, or there would be no scrape."""
        family = GaugeMetricFamily(
            "conductor_dependency_up",
            "1 when this server reaches the part (database, channel_layer), 0 when it does not answer.",
            labels=["part"],
        )
        family.add_metric(["database"], 1)
        family.add_metric(["channel_layer"], 0 if channel_layer_error() else 1)
        return family

    def _captures(self) -> Metric:
        family = GaugeMetricFamily(
            "conductor_captures",
            "Messages the plugin captured, by platform and how it read them (network: the app's own "
            "stream; dom: the page; unknown: it did not say). " + PRUNED,
            labels=["platform", "capture"],
        )
        counts = capture_counts_by_platform()
        for platform in sorted(set(platforms.names()) | {platform for platform, _ in counts}):
            for capture in (*Message.Capture.values, "unknown"):
                family.add_metric([platform, capture], counts.get((platform, capture), 0))
        return family

    def _adapter_reports(self) -> Metric:
        family = GaugeMetricFamily(
            "conductor_adapter_reports",
            "What the plugins' adapters noticed that suggests a chat site changed (browser.adapter_report), "
            "counted, by platform and kind. Rows are kept per client, platform, adapter version and kind, "
            "the oldest evicted beyond a bound, so it may fall.",
            labels=["platform", "kind"],
        )
        counts = adapter_report_counts()
        for platform in sorted(set(platforms.names()) | {platform for platform, _ in counts}):
            for kind in AdapterReport.Kind.values:
                family.add_metric([platform, kind], counts.get((platform, kind), 0))
        return family


# Without auto_describe, registering the collector does not call collect()
# to learn its names, so importing this module reads nothing from the database.
registry = CollectorRegistry(auto_describe=False)
registry.register(ConductorCollector())
