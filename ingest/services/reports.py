"""Storing what plugins' adapters notice about the chat sites (SPEC §6 ``browser.adapter_report``)."""

from __future__ import annotations

import datetime as dt
import logging

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core.logfmt import log_event
from ingest.frames import ADAPTER_REPORT_KINDS, AdapterReportFrame
from ingest.models import AdapterReport
from platforms import platforms

logger = logging.getLogger(__name__)

# The most rows one client keeps: every kind on every platform for three
# adapter versions. A client cannot grow the table beyond it; the row seen
# longest ago gives way to a new one.
ADAPTERS_KEPT = 3
MAX_REPORTS_PER_CLIENT = len(ADAPTER_REPORT_KINDS) * len(platforms.names()) * ADAPTERS_KEPT
# How far back a report's own ``first_at`` is believed (a plugin offline for a while).
MAX_REPORT_AGE = dt.timedelta(days=1)


def adapter_report_record(*, client_pk: int, report: AdapterReportFrame, now: dt.datetime | None = None) -> None:
    """Add one report to its row (client, platform, adapter, kind), creating it, keeping the client's rows bounded."""
    now = now or timezone.now()
    first_at = report.first_at or now
    if not now - MAX_REPORT_AGE <= first_at <= now:
        first_at = now
    rows = AdapterReport.objects.filter(
        client_id=client_pk, platform=report.platform, adapter=report.adapter, kind=report.kind
    )
    with transaction.atomic():
        updated = rows.update(count=F("count") + report.count, last_at=now, detail=report.detail)
        if not updated:
            try:
                with transaction.atomic():
                    AdapterReport.objects.create(
                        client_id=client_pk, platform=report.platform, adapter=report.adapter, kind=report.kind,
                        count=report.count, first_at=first_at, last_at=now, detail=report.detail,
                    )
            except IntegrityError:
                # Two sockets of one client at once: the loser counts instead.
                rows.update(count=F("count") + report.count, last_at=now, detail=report.detail)
            _evict_oldest(client_pk)
    log_event(
        logger, "adapter_report", platform=report.platform, adapter=report.adapter, kind=report.kind,
        count=report.count,
    )


def _evict_oldest(client_pk: int) -> None:
    kept = AdapterReport.objects.filter(client_id=client_pk).order_by("-last_at", "-id")
    stale = list(kept.values_list("id", flat=True)[MAX_REPORTS_PER_CLIENT:])
    if stale:
        AdapterReport.objects.filter(id__in=stale).delete()
