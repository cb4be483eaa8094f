"""The ``instruction.execute`` pipeline: run one instruction's tool, then complete its message (SPEC §3, §5.1).

Executor: success persists the tool's result (the dispatcher stores it as
the task's ``result_json``), bounded by ``CONDUCTOR_RESULT_STORE_MAX_BYTES``
for every tool, MCP tools too (``pipelines.stored_results``). A tool error,
an unknown tool, params that no longer fit and a tool denied since ingest
are terminal; a tool may say a failure is worth another attempt
(``ToolRetryableError``).

Follow-up, after every change of the task's state (the dispatcher's outcome,
a reclaim, an operator's approve, reject, retry or cancel), in the same
transaction: the instruction takes its task's status, and once every block
of the message has finished, the message gets its delivery.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.conf import settings

from automation.kinds import (
    LANE_INSTRUCTIONS,
    ApprovalRequirement,
    KindDisplay,
    KindSpec,
    kinds,
)
from automation.outcomes import (
    ExecutionContext,
    Outcome,
    Refused,
    RetryableFailure,
    Success,
    TerminalFailure,
)
from automation.permissions import APPROVE_CODE_PERMISSION
from core.logfmt import log_event
from ingest.kinds import INSTRUCTION_EXECUTE
from ingest.selectors.policies import block_policy_now
from ingest.services.instructions import FINISHED, instruction_status_set, message_delivery_ensure
from pipelines.stored_results import result_for_storage
from tools.registry import (
    DEFAULT_TARGET,
    Policy,
    ToolCall,
    ToolError,
    ToolOrigin,
    ToolRetryableError,
    UnknownTool,
    tools,
)

if TYPE_CHECKING:
    from automation.models import AutomationTask

logger = logging.getLogger(__name__)


def instruction_execute(ctx: ExecutionContext) -> Outcome:
    task = ctx.task
    payload = task.payload
    tool_name, target = payload.get("tool", ""), payload.get("target", DEFAULT_TARGET)
    params = payload.get("params", {})
    try:
        spec = tools.get(tool_name, target=target)
    except UnknownTool as exc:
        return TerminalFailure(str(exc))
    if spec.run is None:
        return TerminalFailure(f"tool {spec.full_name} cannot run on this server")
    if error := spec.call_error(params, conversation_id=task.conversation_id):
        return TerminalFailure(error)
    policy, allow_network = block_policy_now(
        tool=spec.name, target=spec.target, message_id=task.message_id, conversation_pk=task.conversation_id
    )
    if policy == Policy.DENY:
        name = spec.name if spec.target == DEFAULT_TARGET else spec.full_name
        return Refused(f"permission denied: tool {name} is denied by policy")

    call = ToolCall(
        params=params,
        workspace=settings.CONDUCTOR_WORKSPACE,
        shell_max_timeout_seconds=settings.CONDUCTOR_SHELL_MAX_TIMEOUT_SECONDS,
        cancelled=ctx.cancelled,
        secret_files=settings.CONDUCTOR_SECRET_FILES,
        private_folders=(settings.DATA_DIR,),
        allow_network=allow_network and spec.network_by_policy,
        unconfined=settings.CONDUCTOR_SHELL_UNCONFINED,
        origin=ToolOrigin(
            instruction_id=task.instruction_id, message_id=task.message_id, conversation_id=task.conversation_id,
        ) if task.instruction_id is not None else None,
    )
    max_bytes = settings.CONDUCTOR_RESULT_STORE_MAX_BYTES
    try:
        result = spec.run(call)
    except ToolRetryableError as exc:
        outcome: Outcome = RetryableFailure(str(exc), result=_bounded(exc.result, max_bytes))
    except ToolError as exc:
        outcome = TerminalFailure(str(exc), result=_bounded(exc.result, max_bytes))
    else:
        outcome = Success(result_for_storage(result, max_bytes=max_bytes))
    log_event(logger, "tool_run", task_id=task.pk, tool=spec.full_name, outcome=type(outcome).__name__)
    return outcome


def _bounded(result, max_bytes: int):
    # A failure without a result stores none (not a JSON null).
    return None if result is None else result_for_storage(result, max_bytes=max_bytes)


def instruction_follow_up(task: AutomationTask, actor: str) -> None:
    """Mirror the task's state on its instruction; deliver the message once every block is done."""
    if task.instruction_id is None:
        return
    if instruction_status_set(task=task, actor=actor) in FINISHED and task.message_id is not None:
        message_delivery_ensure(message_id=task.message_id, conversation_id=task.conversation_id, actor=actor)


def tool_is_idempotent(task: AutomationTask) -> bool:
    """Whether an interrupted run of the task's tool may be repeated: only the tool knows."""
    payload = task.payload
    try:
        return tools.get(payload.get("tool", ""), target=payload.get("target", DEFAULT_TARGET)).is_idempotent
    except UnknownTool:
        return False


def tool_approval_requirement(task: AutomationTask) -> ApprovalRequirement | None:
    """Approving a run of a tool that runs code needs ``automation.approve_code``; other tools need nothing more.

    A tool the registry does not know now (a disabled MCP server's) needs it
    too: the server may be back by the time the task runs.
    """
    payload = task.payload
    tool, target = payload.get("tool", ""), payload.get("target", DEFAULT_TARGET)
    try:
        spec = tools.get(tool, target=target)
    except UnknownTool:
        label = tool if target == DEFAULT_TARGET else f"{target}::{tool}"
        return ApprovalRequirement(permission=APPROVE_CODE_PERMISSION, why=f"{label} is not a tool known here now")
    if not spec.runs_code:
        return None
    name = spec.name if spec.target == DEFAULT_TARGET else spec.full_name
    return ApprovalRequirement(permission=APPROVE_CODE_PERMISSION, why=f"{name} runs code")


kinds.register(KindSpec(
    name=INSTRUCTION_EXECUTE,
    lane=LANE_INSTRUCTIONS,
    is_idempotent=tool_is_idempotent,
    is_guarded=True,
    executor=instruction_execute,
    follow_up=instruction_follow_up,
    display=KindDisplay(noun="instruction", is_block=True),
    approval_requirement=tool_approval_requirement,
))
