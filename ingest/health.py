"""How each platform's capture is doing, from the messages and the adapter reports (SPEC §6, §7).

Read-only selectors for the admin (a client's page, the overview) and
/metrics. A platform's capture is "ok" while its latest capture came from
the network; once answers are read from the page after the last network
capture, it is in DOM fallback since the first of them; its current reports
are those seen after its last network capture.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Count, Max, Min, Q, Sum
from django.utils import timezone

from conversations.models import Message
from ingest.models import AdapterReport
from platforms import platforms

# Reports that mean an adapter no longer fits its site, warned about on the overview.
WARNED_KINDS = (AdapterReport.Kind.STREAM_UNRECOGNISED, AdapterReport.Kind.SELECTOR_MISSING)


@dataclass(frozen=True)
class CurrentReport:
    kind: str
    count: int
    first_at: dt.datetime
    last_at: dt.datetime
    detail: dict


@dataclass(frozen=True)
class PlatformHealth:
    platform: str
    label: str
    last_capture_at: dt.datetime | None
    last_network_at: dt.datetime | None
    dom_since: dt.datetime | None  # the first answer read from the page after the last network capture
    dom_answers: int  # answers read from the page since then
    reports: dict[str, CurrentReport] = field(default_factory=dict)  # by kind, seen after the last network capture

    @property
    def is_dom_fallback(self) -> bool:
        return self.dom_answers > 0

    @property
    def has_switched_to_dom(self) -> bool:
        """Captures came from the network before, and come from the page now."""
        return self.is_dom_fallback and self.last_network_at is not None

    def is_silent(self, *, now: dt.datetime, hours: float) -> bool:
        """It had captures, and none for ``hours``."""
        return self.last_capture_at is not None and now - self.last_capture_at > dt.timedelta(hours=hours)

    def summary(self) -> str:
        """One line for a person: "network capture ok", "DOM fallback since 10:32 (14 answers)", …."""
        parts = []
        if self.is_dom_fallback:
            parts.append(f"DOM fallback since {_clock(self.dom_since)} ({_answers(self.dom_answers)})")
        elif self.last_network_at is not None:
            parts.append("network capture ok")
        elif self.last_capture_at is None:
            parts.append("no captures yet")
        unrecognised = self.reports.get(AdapterReport.Kind.STREAM_UNRECOGNISED)
        if unrecognised:
            signature = ", ".join(unrecognised.detail.get("signature") or []) or "none"
            parts.append(f"stream unrecognised: signature {signature}")
        for kind, report in self.reports.items():
            if kind != AdapterReport.Kind.STREAM_UNRECOGNISED:
                parts.append(f"{kind} ×{report.count} (last {_clock(report.last_at)})")
        return " / ".join(parts)


def _clock(when: dt.datetime | None) -> str:
    return timezone.localtime(when).strftime("%H:%M") if when else "?"


def _answers(n: int) -> str:
    return f"{n} answer{'' if n == 1 else 's'}"


def platform_health(*, client_pk: int | None = None) -> list[PlatformHealth]:
    """Every platform's capture health, of one client or of all. Three queries, whatever the rows."""
    messages = Message.objects.filter(source=Message.Source.PLUGIN, role=Message.Role.ASSISTANT)
    reports = AdapterReport.objects.all()
    if client_pk is not None:
        messages = messages.filter(client_id=client_pk)
        reports = reports.filter(client_id=client_pk)
    latest = {
        platform: (any_at, network_at)
        for platform, any_at, network_at in messages.values("conversation__platform").annotate(
            any_at=Max("received_at"), network_at=Max("received_at", filter=Q(capture=Message.Capture.NETWORK)),
        ).values_list("conversation__platform", "any_at", "network_at").order_by()
    }
    network_of = {platform: network_at for platform, (_, network_at) in latest.items()}
    # DOM captures after each platform's last network capture, in one statement.
    after_network = Q()
    for platform in platforms.names():
        since = network_of.get(platform)
        after_network |= Q(conversation__platform=platform, **({"received_at__gt": since} if since else {}))
    fallback = {
        platform: (since, n)
        for platform, since, n in messages.filter(after_network, capture=Message.Capture.DOM)
        .values("conversation__platform").annotate(since=Min("received_at"), n=Count("pk"))
        .values_list("conversation__platform", "since", "n").order_by()
    }
    # A client keeps few rows (ingest.services.reports): read them and add up here.
    current: dict[str, dict[str, CurrentReport]] = {}
    for row in reports.order_by("last_at").only("platform", "kind", "count", "first_at", "last_at", "detail"):
        since = network_of.get(row.platform)
        if since is not None and row.last_at <= since:
            continue
        kinds = current.setdefault(row.platform, {})
        earlier = kinds.get(row.kind)
        kinds[row.kind] = CurrentReport(
            kind=row.kind, count=row.count + (earlier.count if earlier else 0),
            first_at=min(row.first_at, earlier.first_at) if earlier else row.first_at,
            last_at=row.last_at, detail=row.detail or {},
        )
    return [
        PlatformHealth(
            platform=adapter.name, label=adapter.label or adapter.name,
            last_capture_at=latest.get(adapter.name, (None, None))[0], last_network_at=network_of.get(adapter.name),
            dom_since=fallback.get(adapter.name, (None, 0))[0], dom_answers=fallback.get(adapter.name, (None, 0))[1],
            reports=dict(sorted(current.get(adapter.name, {}).items())),
        )
        for adapter in platforms
    ]


def capture_warnings(*, now: dt.datetime | None = None) -> list[str]:
    """What the overview warns about, one sentence each (SPEC §7)."""
    now = now or timezone.now()
    hours = settings.CONDUCTOR_CAPTURE_SILENCE_HOURS
    warnings = []
    for health in platform_health():
        unrecognised = health.reports.get(AdapterReport.Kind.STREAM_UNRECOGNISED)
        if unrecognised:
            since = min(filter(None, (health.dom_since, unrecognised.first_at)))
            read = f", {_answers(health.dom_answers)} read from the page instead" if health.dom_answers else ""
            warnings.append(f"{health.label}'s stream is no longer recognised (since {_clock(since)}{read})")
        elif health.has_switched_to_dom:
            warnings.append(
                f"{health.label}'s captures switched from the network to the page "
                f"(since {_clock(health.dom_since)}, {_answers(health.dom_answers)})"
            )
        missing = health.reports.get(AdapterReport.Kind.SELECTOR_MISSING)
        if missing:
            selectors = missing.detail.get("selectors") or "a selector list"
            warnings.append(
                f"{health.label}'s page no longer matches its {selectors} selectors "
                f"(since {_clock(missing.first_at)}, {missing.count}×)"
            )
        if health.is_silent(now=now, hours=hours):
            warnings.append(
                f"{health.label} had captures but none for {hours:g} hours (the last at "
                f"{timezone.localtime(health.last_capture_at):%Y-%m-%d %H:%M})"
            )
    return warnings


def capture_counts_by_platform() -> dict[tuple[str, str], int]:
    """Plugin captures stored: ``{(platform, capture), n}``, capture "" as "unknown". One query."""
    rows = (
        Message.objects.filter(source=Message.Source.PLUGIN).values_list("conversation__platform", "capture")
        .annotate(n=Count("pk")).order_by()
    )
    counts: dict[tuple[str, str], int] = {}
    for platform, capture, n in rows:
        key = (platform, capture or "unknown")
        counts[key] = counts.get(key, 0) + n
    return counts


def adapter_report_counts() -> dict[tuple[str, str], int]:
    """Adapter reports counted: ``{(platform, kind): n}`` over the rows kept. One query."""
    rows = AdapterReport.objects.values_list("platform", "kind").annotate(n=Sum("count")).order_by()
    return {(platform, kind): n for platform, kind, n in rows}
