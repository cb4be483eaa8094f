"""The task list's own filters: by the method that delivered, the tool, why a task ended, a failure group."""

from __future__ import annotations

from django.contrib import admin

from automation.models import FinishReason, Outcome, TaskStatus
from automation.selectors import failure_group_task_ids
from core.clock import now_ms
from ingest.models import DeliveryRequest
from platforms import DELIVERY_METHODS
from tools.registry import DEFAULT_TARGET, UnknownTool, tools


class DeliveredByFilter(admin.SimpleListFilter):
    """Outbound tasks by the method whose request carried the text (SPEC §6.1)."""

    title = "delivered by"
    parameter_name = "delivered_by"

    def lookups(self, request, model_admin):
        return [(name, name) for name in DELIVERY_METHODS]

    def queryset(self, request, queryset):
        if self.value() not in DELIVERY_METHODS:
            return queryset
        delivered = DeliveryRequest.objects.filter(method=self.value(), delivered=True).values("task_id")
        return queryset.filter(pk__in=delivered)


class ToolFilter(admin.SimpleListFilter):
    """Instruction tasks by the tool their block names; the choices are the tool registry's."""

    title = "tool"
    parameter_name = "tool"

    def lookups(self, request, model_admin):
        return [(spec.full_name, spec.name if spec.target == DEFAULT_TARGET else spec.full_name) for spec in tools]

    def queryset(self, request, queryset):
        target, _, name = (self.value() or "").partition("::")
        try:
            spec = tools.get(name, target=target)
        except UnknownTool:
            return queryset
        return queryset.filter(instruction__target=spec.target, instruction__tool=spec.name)


class OutcomeFilter(admin.SimpleListFilter):
    """Finished tasks by how they ended: a fault and a rejection both leave a task failed (SPEC §2.2)."""

    title = "ended as"
    parameter_name = "outcome"

    def lookups(self, request, model_admin):
        return Outcome.choices

    def queryset(self, request, queryset):
        match self.value():
            case Outcome.FAULT:
                return queryset.filter(status=TaskStatus.FAILED).exclude(finish_reason=FinishReason.REJECTED)
            case Outcome.REJECTED:
                return queryset.filter(status=TaskStatus.FAILED, finish_reason=FinishReason.REJECTED)
            case Outcome.SUCCEEDED | Outcome.CANCELLED:
                return queryset.filter(status=self.value())
        return queryset


class FailureGroupFilter(admin.SimpleListFilter):
    """The faults of one group of the failures page (``automation.selectors.failure_groups``).

    Offered only while it is in use: the failures page links here, and its
    "retry all" posts the retry action through this filter.
    """

    title = "failure group"
    parameter_name = "failure_group"

    def lookups(self, request, model_admin):
        return [(self.value(), "this group")] if self.value() else []

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        return queryset.filter(pk__in=failure_group_task_ids(key=self.value(), now_ms=now_ms()))
