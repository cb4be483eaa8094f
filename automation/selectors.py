"""Reads of the automation app."""

from __future__ import annotations

from django.db.models import Count, Q

from automation.models import AutomationTask, DispatcherState, ToolPolicy
from automation.tools.registry import tools


def tool_policy_for(*, tool: str, client_pk: int | None, conversation_pk: int | None) -> str:
    """The policy that applies to ``tool`` for this client and conversation.

    The most specific ``ToolPolicy`` row wins; without one, the tool's default.
    Raises ``UnknownTool`` for a tool that is not registered.
    """
    default = tools.get(tool).default_policy
    rows = ToolPolicy.objects.filter(
        Q(client__isnull=True) | Q(client_id=client_pk),
        Q(conversation__isnull=True) | Q(conversation_id=conversation_pk),
        tool=tool,
    ).values_list("policy", "client_id", "conversation_id")
    ranked = sorted(rows, key=lambda row: (row[2] is not None, row[1] is not None), reverse=True)
    return ranked[0][0] if ranked else default


def dispatcher_state() -> DispatcherState:
    state, _ = DispatcherState.objects.get_or_create(pk=1)
    return state


def dispatcher_is_paused() -> bool:
    return DispatcherState.objects.filter(pk=1, is_paused=True).exists()


def dispatcher_last_tick_age_seconds(*, now_ms: int) -> float | None:
    last = DispatcherState.objects.filter(pk=1).values_list("last_tick_at", flat=True).first()
    return None if last is None else max(0.0, (now_ms - last) / 1000)


def task_counts_by_kind_and_status() -> dict[str, dict[str, int]]:
    """How many tasks there are of each kind in each status: ``{kind: {status: count}}``."""
    counts: dict[str, dict[str, int]] = {}
    rows = AutomationTask.objects.values_list("kind", "status").annotate(n=Count("pk")).order_by("kind", "status")
    for kind, status, n in rows:
        counts.setdefault(kind, {})[status] = n
    return counts
