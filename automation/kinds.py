"""The kind registry (SPEC §3, STYLE rule 4).

A kind declares its executor and its policy: whether it goes out to a plugin
client (outbound: routed to the conversation's latest link, one in flight per
target, jittered, held while the client is offline), whether instruction
guardrails (approval) apply, the ordering lane it takes within its
conversation, and whether an interrupted run may be repeated. The dispatcher
reads these and never branches on a kind's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from automation.models import AutomationTask
    from automation.outcomes import ExecutionContext, Outcome

Executor = Callable[["ExecutionContext"], "Outcome"]

INSTRUCTION_EXECUTE = "instruction.execute"
INSTRUCTION_DELIVER = "instruction.deliver"
RENEWAL_DELIVER = "renewal.deliver"

# Ordering lanes: within a conversation, a lane's tasks run one at a time in
# creation order, and an unfinished task holds back the ones after it.
LANE_INSTRUCTIONS = "instructions"
LANE_OUTBOUND = "outbound"


class UnknownKind(LookupError):
    pass


class DuplicateKind(ValueError):
    pass


def always(task: AutomationTask) -> bool:
    return True


def never(task: AutomationTask) -> bool:
    return False


# Called inside the transaction of every status change of a task of the kind,
# with the task in its new state: (task, status_from, status_to, actor).
TransitionHook = Callable[["AutomationTask", str, str, str], None]


@dataclass(frozen=True)
class KindSpec:
    name: str
    is_outbound: bool
    lane: str | None
    is_idempotent: Callable[[AutomationTask], bool]
    is_guarded: bool = False
    executor: Executor | None = None
    on_transition: TransitionHook | None = None


class KindRegistry:
    def __init__(self) -> None:
        self._kinds: dict[str, KindSpec] = {}

    def register(self, spec: KindSpec) -> KindSpec:
        if spec.name in self._kinds:
            raise DuplicateKind(f"task kind {spec.name!r} is already registered")
        self._kinds[spec.name] = spec
        return spec

    def unregister(self, name: str) -> None:
        """For tests that register kinds of their own."""
        self._kinds.pop(name, None)

    def executor(self, name: str) -> Callable[[Executor], Executor]:
        """Decorator attaching the executor of a registered kind."""

        def attach(function: Executor) -> Executor:
            spec = self.get(name)
            if spec.executor is not None:
                raise DuplicateKind(f"task kind {name!r} already has an executor")
            self._kinds[name] = replace(spec, executor=function)
            return function

        return attach

    def get(self, name: str) -> KindSpec:
        try:
            return self._kinds[name]
        except KeyError:
            known = ", ".join(sorted(self._kinds))
            raise UnknownKind(f"unknown task kind {name!r}; registered: {known}") from None

    def runnable(self) -> list[str]:
        """Kinds with an executor: the only ones the dispatcher claims."""
        return sorted(name for name, spec in self._kinds.items() if spec.executor is not None)

    def __iter__(self):
        return iter(sorted(self._kinds.values(), key=lambda spec: spec.name))


kinds = KindRegistry()


def _tool_is_idempotent(task: AutomationTask) -> bool:
    from automation.tools.registry import UnknownTool, tools

    payload = task.payload
    try:
        return tools.get(payload.get("tool", ""), target=payload.get("target", "conductor")).is_idempotent
    except UnknownTool:
        return False


def _instruction_transitioned(task: AutomationTask, status_from: str, status_to: str, actor: str) -> None:
    from automation.services.completion import instruction_task_transitioned

    instruction_task_transitioned(task=task, status_to=status_to, actor=actor)


kinds.register(KindSpec(
    name=INSTRUCTION_EXECUTE,
    is_outbound=False,
    lane=LANE_INSTRUCTIONS,
    is_idempotent=_tool_is_idempotent,
    is_guarded=True,
    on_transition=_instruction_transitioned,
))
# A delivery carries its task id as delivery_key, so a plugin that already
# posted it answers with its earlier result: repeating one is harmless.
kinds.register(KindSpec(
    name=INSTRUCTION_DELIVER, is_outbound=True, lane=LANE_OUTBOUND, is_idempotent=always,
))
kinds.register(KindSpec(
    name=RENEWAL_DELIVER, is_outbound=True, lane=LANE_OUTBOUND, is_idempotent=always,
))
