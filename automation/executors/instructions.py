"""``instruction.execute``: run one instruction's tool (SPEC §3, §5.1).

Success persists the tool's result (the dispatcher stores it as the task's
``result_json``). A tool error, an unknown tool, params that no longer fit and
a tool denied since ingest are terminal; a tool may say a failure is worth
another attempt (``ToolRetryableError``).
"""

from __future__ import annotations

import logging

from django.conf import settings

from automation.kinds import INSTRUCTION_EXECUTE, kinds
from automation.outcomes import ExecutionContext, Outcome, RetryableFailure, Success, TerminalFailure
from automation.selectors import tool_policy_for
from automation.tools.registry import (
    DEFAULT_TARGET,
    Policy,
    ToolCall,
    ToolError,
    ToolRetryableError,
    UnknownTool,
    tools,
)
from conductor_site.logfmt import log_event

logger = logging.getLogger(__name__)


@kinds.executor(INSTRUCTION_EXECUTE)
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
    if error := spec.params_error(params):
        return TerminalFailure(error)
    client_pk = task.message.client_id if task.message_id else None
    policy = tool_policy_for(tool=spec.name, client_pk=client_pk, conversation_pk=task.conversation_id)
    if policy == Policy.DENY:
        return TerminalFailure(f"permission denied: tool {spec.name} is denied by policy")

    call = ToolCall(
        params=params,
        workspace=settings.CONDUCTOR_WORKSPACE,
        shell_max_timeout_seconds=settings.CONDUCTOR_SHELL_MAX_TIMEOUT_SECONDS,
        cancelled=ctx.cancelled,
    )
    try:
        result = spec.run(call)
    except ToolRetryableError as exc:
        outcome: Outcome = RetryableFailure(str(exc), result=exc.result)
    except ToolError as exc:
        outcome = TerminalFailure(str(exc), result=exc.result)
    else:
        outcome = Success(result)
    log_event(logger, "tool_run", task_id=task.pk, tool=spec.full_name, outcome=type(outcome).__name__)
    return outcome
