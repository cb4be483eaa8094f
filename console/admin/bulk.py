"""Task actions on every task the list matches ("Select all N", Django's ``select_across``).

Django hands an action the changelist's whole filtered and searched queryset
when the operator chose "Select all N". Such an action must not run at once:
``run_across`` first answers with a confirmation page (how many tasks match,
per status how many the action moves and how many it skips), which posts
the same action back with ``post=yes``. Only then are the tasks moved, through
the same operator service as checked rows, in batches of ``BATCH`` ids read
by keyset, so neither the rows nor all their ids are ever held at once.

What was confirmed is what runs: the page carries the highest ``sequence``
that matched, and tasks created after it are left alone even when they match
the filters by then. One submission moves at most ``LIMIT`` tasks, so one
request stays short; the report says how many are left for the next one.

The same page, with the ticked rows' ids instead of a bound, asks before
retrying ticked rows (``selection_confirmation``): how many of them, per
status, the retry moves and how many it skips. A rejection's page asks for
the optional reason, carried with the confirmation to the service.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from django.contrib import messages
from django.contrib.admin import helpers
from django.db.models import Count, Max, Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from automation.models import TaskStatus
from automation.services.operator import (
    BACK_TO_APPROVAL,
    REJECT_REASON_MAX_CHARS,
    STARTING_STATUSES,
    OperatorReport,
    tasks_reject,
)
from console.helpers import awaiting_approval_text, list_return_url, refused_text

# Ids handed to the operator service at once.
BATCH = 200
# Tasks one confirmed submission moves at most; run the action again for the rest.
LIMIT = 5000
# Checked rows carried through the confirmation page (Django needs one to
# call the action again; "all matching" ignores them). A page has at most 100.
CARRIED_SELECTION = 100

CONFIRM_TEMPLATE = "admin/automation/automationtask/bulk_confirmation.html"


def is_across(request: HttpRequest) -> bool:
    """Did the operator choose "Select all N" (every task the list matches) rather than checked rows?"""
    return request.method == "POST" and request.POST.get("select_across") == "1"


def run_across(
    modeladmin,
    request: HttpRequest,
    queryset: QuerySet,
    *,
    service: Callable[..., OperatorReport],
    verb: str,
    **kwargs,
) -> TemplateResponse | None:
    """Confirm, then move every task of ``queryset`` that ``service`` can move.

    Returns the confirmation page, or None once the tasks were moved (the
    admin then redirects back to the list, where the messages report it).
    """
    through = _confirmed_through(request)
    if through is None:
        return _confirmation(
            modeladmin, request, queryset, action=request.POST.get("action", ""), service=service, verb=verb,
            is_across=True,
        )
    matching = queryset.filter(sequence__lte=through)
    statuses = STARTING_STATUSES[service]
    by_status = _counts_by_status(matching)
    eligible = sum(n for status, n in by_status.items() if status in statuses)
    done, awaiting_approval, skipped, refused = 0, 0, Counter(), {}
    for task_ids in _batches(matching.filter(status__in=statuses), limit=LIMIT):
        report = service(task_ids=task_ids, actor=request.user.username, **kwargs)
        done += len(report.done)
        awaiting_approval += len(report.awaiting_approval)
        skipped.update(report.skipped.values())
        refused.update(report.refused)
    if refused:
        modeladmin.message_user(request, refused_text(refused), messages.ERROR)
    _report(
        modeladmin,
        request,
        verb=verb,
        done=done,
        awaiting_approval=awaiting_approval,
        skipped=skipped,
        eligible=eligible,
        not_eligible={status: n for status, n in by_status.items() if status not in statuses},
    )
    return None


def _confirmed_through(request: HttpRequest) -> int | None:
    """The ``sequence`` bound the confirmation page posted back, or None when this is not a confirmation."""
    if request.POST.get("post") != "yes":
        return None
    try:
        return int(request.POST.get("through", ""))
    except ValueError:
        return None


def _counts_by_status(queryset: QuerySet) -> dict[str, int]:
    """How many tasks of ``queryset`` are in each status: one grouped query."""
    return dict(queryset.order_by().values_list("status").annotate(n=Count("pk")))


def _batches(queryset: QuerySet, *, limit: int) -> Iterator[list[str]]:
    """The ids of ``queryset`` in creation order, ``BATCH`` at a time, ``limit`` in all.

    Keyset paging on (sequence, task_id): each batch is one query that starts
    after the last row of the one before, so moving the tasks (which takes
    them out of ``queryset``) neither skips nor repeats any.
    """
    rows = queryset.order_by("sequence", "pk").values_list("sequence", "pk")
    after, taken = None, 0
    while taken < limit:
        page = rows if after is None else rows.filter(Q(sequence__gt=after[0]) | Q(sequence=after[0], pk__gt=after[1]))
        batch = list(page[: min(BATCH, limit - taken)])
        if not batch:
            return
        yield [pk for _, pk in batch]
        taken += len(batch)
        after = batch[-1]


def selection_confirmation(
    modeladmin,
    request: HttpRequest,
    queryset: QuerySet,
    *,
    action: str,
    service: Callable[..., OperatorReport],
    verb: str,
) -> TemplateResponse:
    """The page between choosing ``action`` for ticked rows and running it: per status, what it moves and skips.

    Confirming posts the same ids back to the list with ``post=yes``; the
    action then runs on them. (From a task's own page the action is posted
    under another name, so it is given here.)
    """
    return _confirmation(modeladmin, request, queryset, action=action, service=service, verb=verb, is_across=False)


def status_counts_text(rows: list[tuple[str, int, bool]], *, is_eligible: bool) -> str:
    """``3 failed, 1 cancelled``: the rows (label, count, eligible) of one side, as words. Pure."""
    return ", ".join(f"{count} {label.lower()}" for label, count, eligible in rows if eligible == is_eligible)


def _confirmation(
    modeladmin, request, queryset, *, action: str, service, verb: str, is_across: bool
) -> TemplateResponse:
    statuses = STARTING_STATUSES[service]
    by_status = _counts_by_status(queryset)
    rows = [
        (TaskStatus(status).label, by_status[status], status in statuses)
        for status in TaskStatus.values
        if by_status.get(status)
    ]
    eligible = sum(n for _, n, is_eligible in rows if is_eligible)
    back_to_approval = BACK_TO_APPROVAL.get(service)
    awaiting_approval = (
        queryset.filter(back_to_approval, status__in=statuses).count() if back_to_approval is not None and eligible
        else 0
    )
    opts = modeladmin.model._meta
    total = sum(by_status.values())
    if is_across:
        title = f"{action.capitalize()} every task the list matches?"
        # Django needs a checked row to call the action again; "all matching" ignores them.
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)[:CARRIED_SELECTION]
        list_url = request.get_full_path()
    else:
        title = f"{action.capitalize()} {'this task' if total == 1 else f'these {total} tasks'}?"
        selected = list(queryset.order_by("sequence").values_list("pk", flat=True))
        list_url = list_return_url(request, opts)
    context = {
        **modeladmin.admin_site.each_context(request),
        # The action's name is its verb: retry, cancel, approve, reject.
        "title": title,
        "opts": opts,
        "action": action,
        "verb": verb.lower(),
        "is_across": is_across,
        "rows": rows,
        "eligible_text": status_counts_text(rows, is_eligible=True),
        "skipped_text": status_counts_text(rows, is_eligible=False),
        "total": total,
        "eligible": eligible,
        "awaiting_approval": awaiting_approval,
        "skipped": total - eligible,
        "limit": LIMIT,
        "over_limit": is_across and eligible > LIMIT,
        "through": queryset.aggregate(last=Max("sequence"))["last"] if is_across else None,
        "selected": selected,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "list_url": list_url,
        "asks_reason": service is tasks_reject,
        "reason_max_chars": REJECT_REASON_MAX_CHARS,
    }
    return TemplateResponse(request, CONFIRM_TEMPLATE, context)


def _report(
    modeladmin,
    request,
    *,
    verb: str,
    done: int,
    awaiting_approval: int,
    skipped: Counter,
    eligible: int,
    not_eligible: dict[str, int],
) -> None:
    level = messages.SUCCESS if done else messages.WARNING
    modeladmin.message_user(request, f"{verb} {done} of the tasks matching the list.", level)
    if awaiting_approval:
        modeladmin.message_user(request, awaiting_approval_text(awaiting_approval), messages.WARNING)
    if not_eligible:
        shown = ", ".join(f"{n} {TaskStatus(status).label.lower()}" for status, n in sorted(not_eligible.items()))
        modeladmin.message_user(
            request,
            f"Skipped {sum(not_eligible.values())} task(s) in a status it does not apply to: {shown}.",
            messages.WARNING,
        )
    if skipped:
        reasons = "; ".join(f"{why}: {n}" for why, n in skipped.most_common())
        modeladmin.message_user(
            request,
            f"Skipped {sum(skipped.values())} task(s) that changed meanwhile ({reasons}).",
            messages.WARNING,
        )
    if eligible > LIMIT:
        modeladmin.message_user(
            request,
            f"Stopped after {LIMIT} tasks, the most one request moves: run the action again for the rest.",
            messages.INFO,
        )
