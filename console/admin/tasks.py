"""Admin for tasks (SPEC §7).

Tasks change only through the operator services: the change page is a
read-only view (payload, result, links, the event timeline), and retry,
cancel, approve and reject are actions that report what they did and what
they skipped, and why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib import admin, messages
from django.contrib.admin import ActionLocation
from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.db.models.functions import Substr
from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join

from automation.errors import error_first_line
from automation.kinds import kinds
from automation.models import AutomationTask, Outcome, TaskEvent, TaskStatus
from automation.selectors import task_events
from automation.services import operator
from console.admin import bulk
from console.admin.story import story_link
from console.admin.task_filters import DeliveredByFilter, FailureGroupFilter, OutcomeFilter, ToolFilter
from console.approval import decision_confirmation, held_call, tasks_networks
from console.helpers import (
    EVERYWHERE,
    admin_link,
    awaiting_approval_text,
    delivery_answer,
    format_ms,
    json_text_block,
    refused_text,
    relative_age,
    text_block,
)
from console.lists import JSONTextContains, ListColumnsMixin
from console.task_waits import MAY_WAIT, WaitsChangeList, wait_html, waits_of
from conversations.models import Conversation
from ingest.models import DeliveryRequest
from tools.registry import DEFAULT_TARGET


def time_field(field: str, *, description: str, sortable: bool = False):
    """A display function showing the epoch-milliseconds ``field`` as ``format_ms`` writes it."""

    @admin.display(description=description, ordering=field if sortable else None)
    def shown(self, task):
        return format_ms(getattr(task, field))

    return shown


def id_list(ids: list[str], *, limit: int = 20) -> str:
    """Ids for a message: the first ``limit`` of them, then how many more."""
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


# The keys a timeline shows first, in this order; the rest follow by name
# (PostgreSQL's jsonb keeps no order of its own).
DETAIL_FIRST = ("method", "error_code", "reason", "request_id")


def step_detail(detail: dict) -> str:
    """A timeline event's detail on one line: ``method: http, error_code: blocked, reason: ...``."""
    def rank(key: str) -> tuple[int, str]:
        return (DETAIL_FIRST.index(key) if key in DETAIL_FIRST else len(DETAIL_FIRST), key)

    return ", ".join(f"{key}: {detail[key]}" for key in sorted(detail, key=rank))


@dataclass(frozen=True)
class ErrorAttempt:
    """Which run the task's ``last_error`` came from: its attempt (0: none had started, as
    for a rejection) and whether an operator's retry, which counts attempts afresh, followed it."""

    attempt: int
    is_before_retry: bool


def error_attempt(events: Iterable[TaskEvent]) -> ErrorAttempt | None:
    """The run of the timeline's last error (``events`` oldest first); None when no event has one.

    Each ``start`` counts an attempt and an operator's ``retry`` starts the
    count again, as ``attempt_count`` does.
    """
    attempt, found = 0, None
    for event in events:
        if event.action == "start":
            attempt += 1
        elif event.action == "retry":
            attempt = 0
            if found is not None:
                found = ErrorAttempt(found.attempt, is_before_retry=True)
        if event.error:
            found = ErrorAttempt(attempt, is_before_retry=False)
    return found


# How much of a payload the list reads for its row.
PAYLOAD_HEAD = 600
# The widths the list's columns keep to, so that a row fits 1280 px.
ARGS_PREVIEW = 48
ERROR_PREVIEW = 72


_TOOL = re.compile(r'"tool":\s*"([^"]*)"')
_PARAMS = re.compile(r'"params":\s*(.*)', re.DOTALL)


def call_summary(kind: str, payload_json: str) -> tuple[str, str]:
    """What a task runs, for its row: the tool (or the kind) and a short preview of its arguments. Pure.

    ``payload_json`` may be the payload's head only (``PAYLOAD_HEAD``): cut JSON
    is read for its tool and the start of its params. A block's task
    (``KindDisplay.is_block``) shows its tool; any other, its kind.
    """
    is_block = kinds.display(kind).is_block
    try:
        payload = json.loads(payload_json)
    except ValueError:
        if not is_block:
            return kind, payload_json
        tool, params = _TOOL.search(payload_json), _PARAMS.search(payload_json)
        return (tool.group(1) if tool else kind), (params.group(1) if params else "")
    if not isinstance(payload, dict):
        return kind, ""
    if is_block:
        target = payload.get("target") or DEFAULT_TARGET
        tool = str(payload.get("tool", ""))
        what = tool if target == DEFAULT_TARGET else f"{target}::{tool}"
        args = payload.get("params")
    else:
        what, args = kind, {key: value for key, value in payload.items() if not key.endswith(("_id", "_ids"))}
    shown = json.dumps(args, ensure_ascii=False, separators=(",", ":"), sort_keys=True) if args else ""
    return what, shown


def attempts_text(attempt_count: int, max_attempts: int, retry_count: int) -> str:
    """``run 2 of 3``, and the series when an operator retried: ``run 1 of 3, series 2``. Pure."""
    text = f"run {attempt_count} of {max_attempts}"
    return text + (f", series {retry_count + 1}" if retry_count else "")


# Each task action's operator service, whose starting states say where the action applies.
ACTION_SERVICES = {
    "retry": operator.tasks_retry,
    "cancel": operator.tasks_cancel,
    "approve": operator.tasks_approve,
    "reject": operator.tasks_reject,
}


# The payload is json.dumps text: searched as JSON writes the term (tool names, params).
AutomationTask._meta.get_field("payload_json").register_lookup(JSONTextContains, "json_icontains")


@admin.register(AutomationTask)
class AutomationTaskAdmin(ListColumnsMixin, admin.ModelAdmin):
    change_form_template = "admin/automation/automationtask/change_form.html"
    list_display = [
        "short_id", "what", "args", "state", "error", "attempts", "conversation_link", "updated_ago",
    ]
    list_display_links = ["short_id"]
    list_filter = [
        "kind", "status", OutcomeFilter, ToolFilter, "target_platform", "target_client_id", DeliveredByFilter,
        FailureGroupFilter,
    ]
    search_fields = [
        "task_id", "dedupe_key", "target_conversation_id", "conversation__remote_id", "conversation__title",
        "payload_json__json_icontains",
    ]
    ordering = ["-created_at", "-pk"]
    show_full_result_count = False
    actions = ["retry", "cancel", "approve", "reject"]
    fieldsets = [
        (None, {"fields": ["task_id", "kind", "status", "waiting_for", "ended_as", "attempts", "last_error",
                           "dedupe_key", "priority"]}),
        ("Source and route", {"fields": [
            "conversation_link", "message_link", "instruction_link",
            "target_client_id", "target_platform", "target_conversation_id",
        ]}),
        ("Times", {"fields": ["created", "updated", "due", "started", "finished", "lease_owner", "lease_expiry"]}),
        ("Payload", {"fields": ["call", "payload"]}),
        ("Result", {"fields": ["result"]}),
        ("Deliveries", {"fields": ["deliveries"]}),
    ]

    # --- permissions: tasks are never added, edited through a form or deleted ----------

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        # The model's change permission allows the actions; no single task is
        # ever edited through a form, so its page is a view page.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False

    def get_fieldsets(self, request, obj=None):
        fieldsets = self.fieldsets
        if obj is not None and obj.status == TaskStatus.SUCCEEDED:
            # Its error is an earlier attempt's, not why it stands where it is.
            main = [("previous_error" if name == "last_error" else name) for name in fieldsets[0][1]["fields"]]
            fieldsets = [(None, {"fields": main}), *fieldsets[1:]]
        display = kinds.display(obj.kind) if obj is not None else None
        if display is not None and display.details is not None:
            title = display.details_title or kinds.noun(obj.kind)
            return [*fieldsets[:1], (title, {"fields": ["kind_details"]}), *fieldsets[1:]]
        return fieldsets

    def get_readonly_fields(self, request, obj=None):
        return flatten_fieldsets(self.get_fieldsets(request, obj))

    def get_queryset(self, request):
        # The page names the task's message and instruction; their text stays behind.
        return super().get_queryset(request).select_related(
            "conversation", "message__conversation", "instruction"
        ).defer("message__text", "message__raw_frame", "instruction__raw_text", "instruction__params")

    def get_list_queryset(self, queryset):
        # A row names only its conversation: no join to messages and instructions.
        # The payload's head only: enough for the tool and an args preview, while
        # a payload may be as long as a whole message.
        return queryset.select_related(None).select_related("conversation").annotate(
            payload_head=Substr("payload_json", 1, PAYLOAD_HEAD)
        ).only(
            "kind", "status", "finish_reason", "last_error", "attempt_count", "max_attempts",
            "retry_count", "updated_at", "conversation__platform", "conversation__remote_id",
            "conversation__title",
        )

    def get_changelist(self, request, **kwargs):
        # Each row's task with why it waits (``task.wait``), read for the page at once.
        return WaitsChangeList

    def get_actions(self, request, action_location=ActionLocation.CHANGE_LIST):
        """On a task's own page, only the actions whose service moves a task in its status.

        The admin asks for the change page's actions without the task, so the
        task comes from the URL. The same list checks a posted action: one
        that no longer applies (the task moved meanwhile) is refused as unknown.
        """
        actions = super().get_actions(request, action_location)
        object_id = getattr(request.resolver_match, "kwargs", {}).get("object_id")
        if action_location != ActionLocation.CHANGE_FORM or object_id is None:
            return actions
        status = AutomationTask.objects.filter(pk=unquote(object_id)).values_list("status", flat=True).first()
        return {
            name: action for name, action in actions.items()
            if name not in ACTION_SERVICES or status in operator.STARTING_STATUSES[ACTION_SERVICES[name]]
        }

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), "timeline": [
            (format_ms(event.at), event, step_detail(event.detail))
            for event in task_events(task_id=unquote(object_id))
        ]}
        return super().change_view(request, object_id, form_url, extra_context)

    # --- columns and fields -----------------------------------------------------------------

    @admin.display(description="conversation", ordering="conversation__title")
    def conversation_link(self, task):
        if task.conversation is None:
            return "-"
        return format_html(
            "{} ({})", admin_link(task.conversation), story_link(task.conversation_id, "in its story", task=task.pk)
        )

    @admin.display(description="message")
    def message_link(self, task):
        return admin_link(task.message)

    @admin.display(description="instruction")
    def instruction_link(self, task):
        return admin_link(task.instruction)

    @admin.display(description="target", ordering="target_client_id")
    def target(self, task):
        return f"{task.target_client_id}/{task.target_platform}" if task.has_route else "-"

    @admin.display(description="attempts", ordering="attempt_count")
    def attempts(self, task):
        return attempts_text(task.attempt_count, task.max_attempts, task.retry_count)

    @admin.display(description="ended as")
    def ended_as(self, task):
        return Outcome(task.outcome).label if task.outcome else "- (not finished)"

    @admin.display(description="id", ordering="task_id")
    def short_id(self, task):
        return format_html('<span title="{}">{}</span>', task.task_id, task.task_id[:8])

    @admin.display(description="tool or kind")
    def what(self, task):
        return format_html('<span title="{}">{}</span>', task.kind, call_summary(task.kind, self._payload_text(task))[0])

    @staticmethod
    def _payload_text(task) -> str:
        return getattr(task, "payload_head", None) or task.payload_json

    @admin.display(description="args")
    def args(self, task):
        shown = call_summary(task.kind, self._payload_text(task))[1]
        if not shown:
            return "-"
        short = shown if len(shown) <= ARGS_PREVIEW else shown[: ARGS_PREVIEW - 1] + "…"
        return format_html('<code class="args-preview" title="{}">{}</code>', shown, short)

    @admin.display(description="status", ordering="status")
    def state(self, task):
        if task.outcome == Outcome.REJECTED:
            return "Rejected"
        if (wait := getattr(task, "wait", None)) is not None:
            # Why it waits, in a word under its status; the sentence on hover (WaitsChangeList).
            return format_html('{}<br><span class="task-wait-code" title="{}">{}</span>',
                               task.get_status_display(), wait.text, wait.label)
        return task.get_status_display()

    @admin.display(description="waiting for")
    def waiting_for(self, task):
        """Why the task does not run (the claim's own rules), with a link to the task it waits on."""
        if task.status not in MAY_WAIT:
            return "-"
        wait = waits_of([task]).get(task.pk)
        return wait_html(wait) if wait is not None else "nothing: it is due, and the dispatcher's next claim takes it"

    @admin.display(description="error")
    def error(self, task):
        line = error_first_line(task.last_error) if task.status != TaskStatus.SUCCEEDED else ""
        if not line:
            return "-"
        short = line if len(line) <= ERROR_PREVIEW else line[: ERROR_PREVIEW - 1] + "…"
        return format_html('<span class="error-preview" title="{}">{}</span>', line, short)

    @admin.display(description="updated", ordering="updated_at")
    def updated_ago(self, task):
        return format_html('<span title="{}">{}</span>', format_ms(task.updated_at), relative_age(task.updated_at))

    @admin.display(description="previous error")
    def previous_error(self, task):
        """A succeeded task's ``last_error``, with the attempt it came from (the timeline has each one)."""
        if not task.last_error:
            return "-"
        found = error_attempt(task_events(task_id=task.pk))
        if found is None or not found.attempt:
            return task.last_error
        retried = ", before an operator's retry" if found.is_before_retry else ""
        return f"(attempt {found.attempt}{retried}) {task.last_error}"

    due = time_field("execute_after", description="execute after", sortable=True)
    updated = time_field("updated_at", description="updated", sortable=True)
    created = time_field("created_at", description="created", sortable=True)
    started = time_field("started_at", description="started")
    finished = time_field("finished_at", description="finished")
    lease_expiry = time_field("lease_until", description="lease until")

    @admin.display(description="the call it runs")
    def call(self, task):
        """A block's tool and params, and what the tool resolves them to (a command's argv and folder)."""
        if not kinds.display(task.kind).is_block:
            return "-"
        return render_to_string("admin/automation/automationtask/call.html", {"call": held_call(
            task.payload, allow_network=tasks_networks([task]).get(task.pk, False))})

    @admin.display(description="payload")
    def payload(self, task):
        return json_text_block(task.payload_json)

    @admin.display(description="result")
    def result(self, task):
        return json_text_block(task.result_json)

    @admin.display(description="")
    def kind_details(self, task):
        """The lines of the kind's own section (``KindDisplay.details``), each with the conversation it names."""
        details = kinds.display(task.kind).details(task)
        named = Conversation.objects.in_bulk({d.conversation_id for d in details if d.conversation_id is not None})

        def shown(detail):
            if detail.is_long:
                return text_block(detail.text)
            named_conversation = named.get(detail.conversation_id)
            return format_html("{} {}", detail.text, admin_link(named_conversation) if named_conversation else "")

        return format_html(
            '<table class="kind-details">{}</table>',
            format_html_join("", '<tr><th scope="row">{}</th><td>{}</td></tr>',
                             ((detail.label, shown(detail)) for detail in details)),
        )

    @admin.display(description="requests to the plugin")
    def deliveries(self, task):
        """Each delivery frame sent for the task: its method and how the plugin answered."""
        requests = DeliveryRequest.objects.filter(task=task).order_by("sent_at", "pk").values(
            "request_id", "method", "sent_at", "answered_at", "delivered",
            "result__ok", "result__status", "result__error", "result__error_code",
        )
        rows = [
            (
                row["method"], format_ms(row["sent_at"]), delivery_answer(row), row["request_id"],
            )
            for row in requests
        ]
        if not rows:
            return "none"
        return format_html(
            "<table><thead><tr><th>method</th><th>sent</th><th>answer</th><th>request</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
        )

    # --- actions: each calls an operator service and reports done and skipped ------------

    def _run(self, request, queryset, service, verb: str, **kwargs):
        if bulk.is_across(request):
            # "Select all N": every task the list matches, after a confirmation page.
            return bulk.run_across(self, request, queryset, service=service, verb=verb, **kwargs)
        # In creation order, so the report reads in the order the tasks were made.
        task_ids = list(queryset.order_by("sequence").values_list("pk", flat=True))
        report = service(task_ids=task_ids, actor=request.user.username, **kwargs)
        if report.done:
            self.message_user(
                request, f"{verb} {len(report.done)} task(s): {id_list(report.done)}", messages.SUCCESS
            )
        if report.awaiting_approval:
            self.message_user(
                request, f"{awaiting_approval_text(len(report.awaiting_approval))} {id_list(report.awaiting_approval)}",
                messages.WARNING,
            )
        if report.refused:
            self.message_user(request, refused_text(report.refused), messages.ERROR)
        if report.skipped:
            by_reason: dict[str, list[str]] = {}
            for task_id, why in report.skipped.items():
                by_reason.setdefault(why, []).append(task_id)
            reasons = "; ".join(f"{why}: {id_list(ids)}" for why, ids in by_reason.items())
            self.message_user(
                request, f"Skipped {len(report.skipped)} task(s) ({reasons})", messages.WARNING
            )

    @staticmethod
    def _is_confirmed(request) -> bool:
        """Whether the action was posted from its confirmation page ("Select all N" has its own, in ``bulk``)."""
        return bulk.is_across(request) or request.POST.get("post") == "yes"

    @admin.action(permissions=["change"], description="Retry selected tasks (failed or cancelled)",
                  location=EVERYWHERE)
    def retry(self, request, queryset):
        # Checked rows first see how many of each status the retry moves and skips.
        if not self._is_confirmed(request):
            return bulk.selection_confirmation(
                self, request, queryset, action="retry", service=operator.tasks_retry, verb="Retried"
            )
        # A task approved before is approved again by its retry: the retrier needs
        # the approver's permission (operator.tasks_retry checks it).
        return self._run(request, queryset, operator.tasks_retry, "Retried", has_perm=request.user.has_perm)

    @admin.action(permissions=["change"], description="Cancel selected tasks (running ones too)",
                  location=EVERYWHERE)
    def cancel(self, request, queryset):
        return self._run(request, queryset, operator.tasks_cancel, "Cancelled")

    @admin.action(permissions=["change"], description="Approve selected blocked tasks", location=EVERYWHERE)
    def approve(self, request, queryset):
        # "Select all N" goes to bulk's page of counts; checked rows first see each task's
        # exact call, and that page's "approve" posts back here with post=yes.
        if not self._is_confirmed(request):
            return decision_confirmation(self, request, queryset, decision="approve")
        return self._run(request, queryset, operator.tasks_approve, "Approved", has_perm=request.user.has_perm)

    @admin.action(permissions=["change"], description="Reject selected blocked tasks", location=EVERYWHERE)
    def reject(self, request, queryset):
        # As approve: checked rows first see each call, and either page asks for an optional reason.
        if not self._is_confirmed(request):
            return decision_confirmation(self, request, queryset, decision="reject")
        return self._run(request, queryset, operator.tasks_reject, "Rejected", reason=request.POST.get("reason", ""))
