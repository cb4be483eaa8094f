"""What an operator sees before approving a held instruction: the exact call, resolved as the tool resolves it.

Shown on the approve and reject actions' confirmation page
(``decision_confirmation``), on a task's page and in the conversation's story.

A held ``instruction.execute`` task carries its tool and params in its
payload. ``held_call`` shows them as they are, and, for a tool with a
``plan`` (``shell.run``: the argv, the real folder it runs in, its timeout;
``files.write``: the real file), what the run would do with them on this
server now. The plan resolves paths in the workspace, so it reads the file
system, but it runs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.template.response import TemplateResponse

from automation.kinds import kinds
from automation.models import AutomationTask, TaskStatus
from automation.services.operator import REJECT_REASON_MAX_CHARS
from console.helpers import displayable_text, list_return_url, readable_json
from ingest.selectors.clients import message_clients
from ingest.selectors.policies import networks_allowed
from tools.registry import DEFAULT_TARGET, ToolCall, ToolError, UnknownTool, tools


@dataclass(frozen=True)
class HeldCall:
    """One call as an operator reviews it. ``plan``: (label, shown value) pairs; ``plan_error``: why it would be refused."""

    tool: str
    params: str  # indented JSON
    plan: list[tuple[str, str]]
    plan_error: str
    # Approving it needs automation.approve_code (ToolSpec.runs_code; a tool not known now too).
    runs_code: bool = False


def _shown(value: Any) -> str:
    """A plan's value: text as it is, a list of strings (an argv) on one line, anything else as indented JSON."""
    if isinstance(value, str):
        return displayable_text(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return displayable_text(json.dumps(value, ensure_ascii=False))
    return readable_json(value)


def tasks_networks(tasks: Sequence[AutomationTask]) -> dict[int, bool]:
    """For each task of a tool whose network a policy decides (``shell.run``): whether the policy that
    applies now to its message's client and conversation allows the network. At most two queries."""
    scopes = {
        task.pk: (str(task.payload.get("tool", "")), str(task.payload.get("target") or DEFAULT_TARGET),
                  task.message_id, task.conversation_id)
        for task in tasks if kinds.display(task.kind).is_block
    }
    if not scopes:
        return {}
    clients = message_clients(message_ids=[scope[2] for scope in scopes.values()])
    blocks = {pk: (tool, target, clients.get(message_id), conversation_id)
              for pk, (tool, target, message_id, conversation_id) in scopes.items()}
    networks = networks_allowed(blocks=blocks.values())
    return {pk: networks.get(block, False) for pk, block in blocks.items()}


def held_call(payload: dict[str, Any], *, allow_network: bool = False) -> HeldCall:
    """The call an ``instruction.execute`` payload holds: tool, params and, where the tool has one, its plan.

    ``allow_network``: whether the policy lets its command use the network
    (``tasks_networks``); a ``shell.run`` plan says so.
    """
    name, target = (
        str(payload.get("tool", "")),
        str(payload.get("target") or DEFAULT_TARGET),
    )
    params = payload.get("params")
    label = name if target == DEFAULT_TARGET else f"{target}::{name}"
    shown = readable_json(params, sort_keys=True)
    try:
        spec = tools.get(name, target=target)
    except UnknownTool as exc:
        return HeldCall(displayable_text(label), shown, [], displayable_text(str(exc)), runs_code=True)
    runs_code = spec.runs_code
    if not isinstance(params, dict):
        return HeldCall(
            displayable_text(label), shown, [], "params are not a JSON object", runs_code=runs_code
        )
    if error := spec.params_error(params):
        return HeldCall(
            displayable_text(label),
            shown,
            [],
            displayable_text(f"the run would refuse it: {error}"),
            runs_code=runs_code,
        )
    if spec.target != DEFAULT_TARGET:
        # An MCP tool: what the operator must see is which server and tool, and what it says it does.
        about = [("MCP server", spec.target), ("tool", spec.name), ("description", spec.description or "—")]
        return HeldCall(
            displayable_text(label), shown, [(key, _shown(value)) for key, value in about], "", runs_code=runs_code
        )
    if spec.plan is None:
        return HeldCall(displayable_text(label), shown, [], "", runs_code=runs_code)
    call = ToolCall(
        params=params,
        workspace=settings.CONDUCTOR_WORKSPACE,
        shell_max_timeout_seconds=settings.CONDUCTOR_SHELL_MAX_TIMEOUT_SECONDS,
        allow_network=allow_network,
    )
    try:
        plan = spec.plan(call)
    except ToolError as exc:
        return HeldCall(
            displayable_text(label),
            shown,
            [],
            displayable_text(f"the run would refuse it: {exc}"),
            runs_code=runs_code,
        )
    return HeldCall(
        displayable_text(label),
        shown,
        [(key, _shown(value)) for key, value in plan.items()],
        "",
        runs_code=runs_code,
    )


# --- the approve and reject actions' confirmation page ---------------------------------------

# Tasks one confirmation lists; only those listed are approved or rejected when it is confirmed.
APPROVAL_SHOWN = 100
CONFIRMATION_TEMPLATE = "admin/automation/automationtask/decision_confirmation.html"


@dataclass(frozen=True)
class Decision:
    """What the page says of one decision on held calls, and what its button posts back."""

    action: str  # the task list's action, posted back with post=yes
    title: str
    crumb: str
    done: str  # "approved": what each blocked task listed will be
    does: str  # what confirming does to each blocked call
    button: str  # the button's words, before "N task(s)"
    asks_reason: bool = False


DECISIONS = {
    "approve": Decision(
        "approve", "Approve these calls?", "Approve", "approved",
        "Approving runs each call below exactly as shown, on this server, as soon as the dispatcher claims it.",
        "Yes, approve and run",
    ),
    "reject": Decision(
        "reject", "Reject these calls?", "Reject", "rejected",
        "Rejecting ends each call below without running it. Its block goes back to the chat as failed, "
        "\"rejected by\" you, with your reason when you give one.",
        "Yes, reject",
        asks_reason=True,
    ),
}


def decision_confirmation(model_admin, request, queryset, *, decision: str) -> TemplateResponse:
    """The page between choosing "approve" or "reject" and doing it: each selected task's exact call.

    It lists the first ``APPROVAL_SHOWN`` selected tasks in creation order:
    a blocked one with its tool, params and plan, any other as what the
    decision will skip. Confirming posts back exactly the listed ids, so
    what is decided is what was shown, never the rest of a larger selection.
    A rejection's page asks for an optional reason (``REJECT_REASON_MAX_CHARS``).
    """
    shown_decision = DECISIONS[decision]
    # Read afresh: the changelist's queryset is shaped for its columns.
    selected = list(
        AutomationTask.objects.filter(pk__in=queryset.values("pk"))
        .select_related("conversation")
        .defer("result_json")
        .order_by("sequence")[: APPROVAL_SHOWN + 1]
    )
    shown = selected[:APPROVAL_SHOWN]
    networks = tasks_networks([task for task in shown if task.status == TaskStatus.BLOCKED])
    rows = [
        (task, held_call(task.payload, allow_network=networks.get(task.pk, False))
         if task.status == TaskStatus.BLOCKED else None)
        for task in shown
    ]
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": shown_decision.title,
        "subtitle": None,
        "opts": opts,
        "decision": shown_decision,
        "reason_max_chars": REJECT_REASON_MAX_CHARS,
        "rows": rows,
        "blocked": sum(1 for _, call in rows if call is not None),
        "is_cut": len(selected) > APPROVAL_SHOWN,
        "shown_limit": APPROVAL_SHOWN,
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "return_url": list_return_url(request, opts),
    }
    return TemplateResponse(request, CONFIRMATION_TEMPLATE, context)
