"""The site's front door, the admin's overview page and its global pause switch (SPEC §4, §7).

The overview and the switch are wired in ``conductor_site/urls.py`` through
``admin.site.admin_view``, so both need a staff login; the front door (``/``)
needs none and only redirects. The overview shows tasks, their errors, conversation
titles and plugin clients, so it also needs the permission to view tasks;
the pause switch is for superusers. Reads come from the selectors, the one
write from ``dispatcher_pause_set``; this module only shapes what the
template draws.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.decorators import permission_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from automation.kinds import kinds
from automation.models import TERMINAL_STATUSES, Outcome, TaskStatus
from automation.loop import stall_seconds
from automation.selectors import (
    HourlyFinishes,
    dispatcher_state,
    dispatcher_servers_signing_otherwise,
    dispatcher_worker_newest,
    dispatcher_workers_live,
    paused_kinds,
    task_counts_by_kind_status_and_outcome,
    task_finishes_by_hour,
    tasks_awaiting_approval,
    tasks_recently_failed,
)
from automation.services.dispatcher_state import dispatcher_pause_set, kind_pause_set
from console.first_run import has_staff_user
from console.helpers import datetime_from_ms, log_change
from core.clock import now_ms
from core.keys import other_key_report
from core.layer_send import channel_layer_error
from ingest.health import capture_warnings
from ingest.selectors.clients import plugin_clients_connected

# Who may open the overview; templates/admin/index.html shows its link only to them.
OVERVIEW_PERMISSION = "automation.view_automationtask"

# The dispatcher counts as lagging when its newest heartbeat (a loop beats after a tick) is older than this many ticks.
LAG_TICKS = 3


# --- the throughput chart ----------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    height: float
    count: int
    series: str
    hour: dt.datetime


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot_top: int
    plot_bottom: int
    bar_width: float
    bars: list[Bar]
    labels: list[tuple[float, str]]  # (x, text) under the axis
    max_count: int
    total_succeeded: int
    total_failed: int  # faults
    total_rejected: int


CHART_WIDTH, CHART_HEIGHT = 720, 200
CHART_TOP, CHART_BOTTOM, CHART_LEFT = 16, 170, 8
LABEL_EVERY_HOURS = 3


def chart_layout(buckets: Sequence[HourlyFinishes]) -> Chart:
    """Geometry of a grouped bar chart: per hour, a succeeded, a failed (fault) and a rejected bar.

    Pure: the template draws the rectangles as they are given here.
    """
    max_count = max([1, *(max(b.succeeded, b.failed, b.rejected) for b in buckets)])
    plot_height = CHART_BOTTOM - CHART_TOP
    slot = (CHART_WIDTH - 2 * CHART_LEFT) / max(1, len(buckets))
    bar_width = slot * 0.8 / 3
    bars, labels = [], []
    for i, bucket in enumerate(buckets):
        hour = datetime_from_ms(bucket.start_ms)
        left = CHART_LEFT + i * slot + slot * 0.1
        series_counts = (
            (0, "succeeded", bucket.succeeded), (bar_width, "failed", bucket.failed),
            (2 * bar_width, "rejected", bucket.rejected),
        )
        for offset, series, count in series_counts:
            height = plot_height * count / max_count
            bars.append(
                Bar(x=round(left + offset, 1), y=round(CHART_BOTTOM - height, 1), height=round(height, 1),
                    count=count, series=series, hour=hour)
            )
        if hour.hour % LABEL_EVERY_HOURS == 0:
            labels.append((round(left + 1.5 * bar_width, 1), f"{hour:%H}:00"))
    return Chart(
        width=CHART_WIDTH, height=CHART_HEIGHT, plot_top=CHART_TOP, plot_bottom=CHART_BOTTOM,
        bar_width=round(bar_width, 1), bars=bars, labels=labels, max_count=max_count,
        total_succeeded=sum(b.succeeded for b in buckets), total_failed=sum(b.failed for b in buckets), total_rejected=sum(b.rejected for b in buckets),
    )


# --- the front door --------------------------------------------------------------------


@require_GET
def front_door(request):
    """``/``, where ``make run`` and the admin's "View site" send people: the console has no public page.

    A staff user who may read the overview goes there, other staff to the
    admin's index (the overview would refuse them), anyone else to the admin's
    login, which sends them back here once they are in.
    """
    user = request.user
    if user.is_active and user.is_staff:
        return redirect("admin-overview" if user.has_perm(OVERVIEW_PERMISSION) else "admin:index")
    return redirect_to_login(request.get_full_path(), reverse("admin:login"))


# --- the page ------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of the overview's table: a status, or how a finished task ended."""

    value: str
    label: str
    query: str  # the task list's filter for it


# Open statuses, then how tasks ended: a fault and a rejection both leave a task
# failed (SPEC §2.2), and the table keeps them apart.
COLUMNS = [
    *(Column(s.value, s.label, f"status__exact={s.value}") for s in TaskStatus if s not in TERMINAL_STATUSES),
    Column(Outcome.SUCCEEDED, "Succeeded", "status__exact=succeeded"),
    Column(Outcome.FAULT, "Failed", "status__exact=failed&outcome=fault"),
    Column(Outcome.REJECTED, "Rejected", "status__exact=failed&outcome=rejected"),
    Column(Outcome.CANCELLED, "Cancelled", "status__exact=cancelled"),
]


def status_table(counts: dict[tuple[str, str, str], int]) -> dict:
    """Per kind, a (column, count) cell for every column; and the totals per column.

    ``counts``: ``{(kind, status, outcome): n}``; a finished task counts in its
    outcome's column, an open one in its status's.
    """
    by_kind: dict[str, dict[str, int]] = {}
    for (kind, status, outcome), n in counts.items():
        cells = by_kind.setdefault(kind, {})
        cells[outcome or status] = cells.get(outcome or status, 0) + n
    rows = [
        (kind, [(column, cells.get(column.value, 0)) for column in COLUMNS], sum(cells.values()))
        for kind, cells in sorted(by_kind.items())
    ]
    totals = [(column, sum(cells.get(column.value, 0) for cells in by_kind.values())) for column in COLUMNS]
    return {"statuses": COLUMNS, "rows": rows, "totals": totals, "total": sum(n for _, n in totals)}


@permission_required(OVERVIEW_PERMISSION, raise_exception=True)
def overview(request):
    """Tasks by status and kind, held instructions, throughput, failures, dispatcher, clients."""
    now = now_ms()
    stalled_before = now - int(stall_seconds(settings.CONDUCTOR_TICK_SECONDS) * 1000)
    newest = dispatcher_worker_newest()
    tick_age = None if newest is None else max(0.0, (now - newest.heartbeat_at) / 1000)
    lag_limit = LAG_TICKS * settings.CONDUCTOR_TICK_SECONDS
    table = status_table(task_counts_by_kind_status_and_outcome())
    totals = {column.value: n for column, n in table["totals"]}
    context = {
        **admin.site.each_context(request),
        "title": "Overview",
        "table": table,
        "blocked_count": totals[TaskStatus.BLOCKED],
        "awaiting_approval": [
            (datetime_from_ms(task.created_at), task) for task in tasks_awaiting_approval(limit=10)
        ],
        "chart": chart_layout(task_finishes_by_hour(now_ms=now, hours=24)),
        "recent_failures": [
            (datetime_from_ms(task.finished_at), task) for task in tasks_recently_failed(limit=10)
        ],
        "dispatcher": dispatcher_state(),
        "newest_worker": newest,
        "last_tick": None if newest is None else datetime_from_ms(newest.heartbeat_at),
        "tick_age": tick_age,
        "lag_limit": lag_limit,
        "is_lagging": tick_age is None or tick_age > lag_limit,
        "workers": [
            (worker, max(0.0, (now - worker.heartbeat_at) / 1000))
            for worker in dispatcher_workers_live(stalled_before=stalled_before)
        ],
        "other_secret_key": other_key_report(dispatcher_servers_signing_otherwise(stalled_before=stalled_before)),
        "channel_layer_error": channel_layer_error(),
        "connected_clients": plugin_clients_connected().order_by("client_id"),
        "capture_warnings": capture_warnings(),
        "can_pause": request.user.is_superuser,
        "paused_kinds": paused_kinds(),
    }
    return TemplateResponse(request, "admin/conductor/overview.html", context)


@require_POST
def dispatcher_pause(request):
    """The global pause switch: superusers only. ``is_paused=1`` pauses, ``0`` resumes."""
    if not request.user.is_superuser:
        raise PermissionDenied
    choice = request.POST.get("is_paused")
    if choice not in ("0", "1"):
        messages.error(request, "Choose to pause or to resume.")
        return redirect("admin-overview")
    is_paused = choice == "1"
    if dispatcher_pause_set(is_paused=is_paused, actor=request.user.username):
        log_change(request, [dispatcher_state()], "Paused all claiming" if is_paused else "Resumed claiming")
        messages.success(
            request,
            "The dispatcher is paused: no task is claimed until it is resumed."
            if is_paused else "The dispatcher is running again.",
        )
    else:
        messages.info(request, f"The dispatcher was already {'paused' if is_paused else 'running'}.")
    return redirect("admin-overview")


def admin_login(request):
    """The admin's login page, which on a first run (no staff user yet) says how to create one."""
    return admin.site.login(request, extra_context={"is_first_run": not has_staff_user()})


@require_POST
def kind_pause(request):
    """Pause or resume claiming one task kind: superusers only. ``is_paused=1`` pauses, ``0`` resumes."""
    if not request.user.is_superuser:
        raise PermissionDenied
    kind, choice = request.POST.get("kind", ""), request.POST.get("is_paused")
    if kind not in kinds.names() or choice not in ("0", "1"):
        messages.error(request, "Choose a known kind, to pause or to resume.")
        return redirect("admin-overview")
    is_paused = choice == "1"
    if kind_pause_set(kind=kind, is_paused=is_paused, actor=request.user.username):
        log_change(request, [dispatcher_state()], f"{'Paused' if is_paused else 'Resumed'} claiming {kind}")
        messages.success(
            request,
            f"{kind} is paused: its tasks wait until it is resumed." if is_paused else f"{kind} is claimed again.",
        )
    else:
        messages.info(request, f"{kind} was already {'paused' if is_paused else 'running'}.")
    return redirect("admin-overview")


# Admin pages whose model moved to another app: the old address answers with
# the new one, so bookmarks and links written before the move keep working.
MOVED_ADMIN_PAGES = {
    "automation/toolpolicy": "ingest/toolpolicy",
}


@require_GET
def moved_admin_page(request, old: str, rest: str):
    """A permanent redirect from ``/admin/<old>/<rest>`` to the page's address in its new app, query kept."""
    url = f"/admin/{MOVED_ADMIN_PAGES[old]}/{quote(rest)}"
    if request.META.get("QUERY_STRING"):
        url += "?" + request.META["QUERY_STRING"]
    return redirect(url, permanent=True)
