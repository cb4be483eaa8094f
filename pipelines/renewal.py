"""The renewal projector (SPEC §1.5, §3 ``renewal.deliver``, §8 ``renew``).

A conversation with renewal turned on (off by default) that has been idle for
its ``renewal_idle_seconds`` gets one ``renewal.deliver`` task carrying its
``renewal_text``. The dedupe key names the idle period (the moment of the last
activity), so each period gets at most one renewal: a chat that never answers
is not nagged again until something new happens in it. Beyond that, at most
``renewal_daily_cap`` renewals per UTC day, and never a second one while one
is still open. Paused conversations and ones without a link (no route) are
never renewed. The projector runs every minute (``pipelines.jobs``); the
kind's executor posts the text through ``pipelines.deliveries``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.utils import timezone

from automation.kinds import KindDisplay, kinds
from automation.selectors import existing_dedupe_keys, task_counts_per_conversation
from automation.outcomes import ExecutionContext, Outcome, TerminalFailure
from automation.schedules import Schedule, schedules
from automation.services.tasks import task_create
from conversations.selectors import conversations_with_link_flag
from core.clock import ms_from_datetime
from core.logfmt import log_event
from pipelines.deliveries import deliver_text, outbound_kind

if TYPE_CHECKING:
    from automation.models import AutomationTask
    from conversations.models import Conversation

logger = logging.getLogger(__name__)

RENEWAL_DELIVER = "renewal.deliver"

DEFAULT_RENEWAL_TEXT = "Please continue."
DRY_RUN_TASK_ID = "(dry run)"
# Dedupe keys looked up per query: well under SQLite's bound-parameter limit.

# Why a conversation that was considered got no task.
SKIP_PAUSED = "paused"
SKIP_NO_LINK = "no link"
SKIP_NO_ACTIVITY = "no activity yet"
SKIP_NOT_IDLE = "not idle yet"
SKIP_OPEN = "a renewal is still open"
SKIP_DAILY_CAP = "daily cap reached"
SKIP_ALREADY_RENEWED = "already renewed since its last activity"
SKIP_NOT_FOUND = "no such conversation"
SKIP_JUST_RENEWED = "renewed by another request at the same moment"


@dataclass
class RenewalReport:
    """What a projection (or an operator's "renew now") created and what it passed over."""

    created: list[tuple[int, str]] = field(default_factory=list)  # (conversation pk, task_id)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (conversation pk, why)
    dry_run: bool = False

    def __str__(self) -> str:
        created = f"{len(self.created)} {'would be created' if self.dry_run else 'created'}"
        summary = f"{created}, {len(self.skipped)} skipped"
        if not self.skipped:
            return summary
        # Grouped by reason, so a long list of idle-but-not-yet-due chats stays readable.
        by_reason: dict[str, list[str]] = {}
        for pk, why in self.skipped:
            by_reason.setdefault(why, []).append(str(pk))
        details = "; ".join(f"{', '.join(pks)}: {why}" for why, pks in by_reason.items())
        return f"{summary} ({details})"


def renewal_text(conversation: Conversation) -> str:
    return conversation.renewal_text.strip() or DEFAULT_RENEWAL_TEXT


def renewal_dedupe_key(conversation: Conversation) -> str:
    """The projector's key for the conversation's current idle period."""
    return f"renew:{conversation.pk}:{ms_from_datetime(conversation.last_activity_at)}"


def _conversations_with_link():
    return conversations_with_link_flag(
        "pk", "paused", "renewal_idle_seconds", "renewal_text", "renewal_daily_cap", "last_activity_at"
    )


def _renewal_create(
    *, conversation: Conversation, dedupe_key: str, actor: str, now: dt.datetime
) -> AutomationTask | None:
    """Create the task through ``task_create``; None when its dedupe key already exists.

    task_create routes it to the conversation's latest link.
    """
    task, created = task_create(
        kind=RENEWAL_DELIVER,
        payload={"conversation_id": conversation.pk, "text": renewal_text(conversation)},
        actor=actor,
        dedupe_key=dedupe_key,
        conversation_id=conversation.pk,
        now=ms_from_datetime(now),
    )
    if not created:
        return None
    log_event(logger, "renewal_create", conversation_id=conversation.pk, task_id=task.pk, actor=actor)
    return task


def renewal_project(
    *, now: dt.datetime | None = None, dry_run: bool = False, actor: str = "renewal"
) -> RenewalReport:
    """Write a ``renewal.deliver`` task for each renewal-enabled conversation that is due.

    Due: not paused, has a link, idle for at least ``renewal_idle_seconds``
    since ``last_activity_at``, fewer than ``renewal_daily_cap`` renewals
    created since the start of the UTC day, no renewal still open, and none
    yet for this idle period. Every renewal-enabled conversation that is not
    due is reported as skipped with the reason. With ``dry_run``, decide the
    same and create nothing.

    Runs a fixed number of queries to decide, whatever the number of
    conversations, plus the inserts of the tasks it creates. Two runs at once
    (the schedule and the command) cannot both renew one idle period: the
    dedupe key is unique. The cap and open-renewal checks take no lock, so an
    operator's "renew now" at the same moment can go one past them; accepted.
    """
    now = now or timezone.now()
    day_start = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    report = RenewalReport(dry_run=dry_run)

    conversations = list(_conversations_with_link().filter(renewal_enabled=True).order_by("pk"))
    counts = task_counts_per_conversation(kind=RENEWAL_DELIVER, since_ms=ms_from_datetime(day_start))
    due: list[tuple[Conversation, str]] = []
    for conversation in conversations:
        today, still_open = counts.get(conversation.pk, (0, 0))
        if conversation.paused:
            why = SKIP_PAUSED
        elif not conversation.has_link:
            why = SKIP_NO_LINK
        elif conversation.last_activity_at is None:
            why = SKIP_NO_ACTIVITY
        # Per-row interval arithmetic is not portable SQL, so the idle cut-off is computed here.
        elif now - conversation.last_activity_at < dt.timedelta(seconds=conversation.renewal_idle_seconds):
            why = SKIP_NOT_IDLE
        elif still_open:
            why = SKIP_OPEN
        elif today >= conversation.renewal_daily_cap:
            why = SKIP_DAILY_CAP
        else:
            due.append((conversation, renewal_dedupe_key(conversation)))
            continue
        report.skipped.append((conversation.pk, why))

    renewed = existing_dedupe_keys([key for _, key in due])
    for conversation, key in due:
        if key in renewed:
            report.skipped.append((conversation.pk, SKIP_ALREADY_RENEWED))
        elif dry_run:
            report.created.append((conversation.pk, DRY_RUN_TASK_ID))
        elif task := _renewal_create(conversation=conversation, dedupe_key=key, actor=actor, now=now):
            report.created.append((conversation.pk, task.pk))
        else:  # another run created it since the lookup
            report.skipped.append((conversation.pk, SKIP_ALREADY_RENEWED))
    return report


def conversations_renew_now(
    *, conversation_ids: Iterable[int], actor: str, now: dt.datetime | None = None
) -> RenewalReport:
    """The operator's "renew now": one ``renewal.deliver`` task per selected conversation.

    Ignores whether renewal is enabled, the idle interval, the daily cap and
    open renewals (the operator asked), but never renews a paused conversation
    or one without a link; those are reported as skipped. ``actor`` is the
    operator's username. The dedupe key cannot collide with the projector's,
    and only repeats within one millisecond (a double submit).
    """
    now = now or timezone.now()
    ids = list(dict.fromkeys(conversation_ids))
    conversations = _conversations_with_link().in_bulk(ids)
    report = RenewalReport()
    for pk in ids:
        conversation = conversations.get(pk)
        if conversation is None:
            report.skipped.append((pk, SKIP_NOT_FOUND))
        elif conversation.paused:
            report.skipped.append((pk, SKIP_PAUSED))
        elif not conversation.has_link:
            report.skipped.append((pk, SKIP_NO_LINK))
        elif task := _renewal_create(
            conversation=conversation, dedupe_key=f"renew:{pk}:now:{ms_from_datetime(now)}", actor=actor, now=now
        ):
            report.created.append((pk, task.pk))
        else:
            report.skipped.append((pk, SKIP_JUST_RENEWED))
    return report


def renewal_deliver(ctx: ExecutionContext) -> Outcome:
    text = ctx.task.payload.get("text")
    if not isinstance(text, str) or not text.strip():
        return TerminalFailure("payload missing: no renewal text")
    return deliver_text(ctx, text=text)


kinds.register(outbound_kind(name=RENEWAL_DELIVER, executor=renewal_deliver, display=KindDisplay(noun="renewal")))
schedules.register(Schedule(name="conductor.renew", func="pipelines.jobs.renew_scheduled", minutes=1))
