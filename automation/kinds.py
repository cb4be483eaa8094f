"""The kind registry (SPEC §3, STYLE rule 4): what the engine knows of a kind.

The engine knows no kind by name. A kind's pipeline (``pipelines``) registers
a ``KindSpec`` when the apps are ready, and everything the dispatcher, the
claim and the operator services do differently for a kind comes from it:

- ``targets``: set for an outbound kind (its tasks go out to a plugin client):
  the task is routed to its conversation's most recent link at creation, at
  most one such task is in flight per target, it waits the outbound jitter,
  and it is held while ``targets`` says its target is absent;
- ``lane``: the ordering lane it takes within its conversation;
- ``is_idempotent(task)``: whether an interrupted run may be repeated;
- ``is_guarded``: whether guardrails (approval) apply, so it may start blocked;
- ``executor``: runs one attempt and returns an ``Outcome``;
- ``follow_up(task, actor)``: what the pipeline does once its task changed
  state (an outcome recorded, a reclaim, an operator's approve, reject,
  retry or cancel). Called explicitly by those services, in the same
  transaction as the change (``automation.services.steps``); never by the
  state machine itself;
- ``display``: how the console shows its tasks (``KindDisplay``), so that
  the console asks the spec instead of naming kinds;
- ``approval_requirement(task)``: what approving the (blocked) task needs
  of the operator beyond the task admin's change permission, and why (an
  instruction whose tool runs code), or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from core.registry import Registry

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from automation.models import AutomationTask
    from automation.outcomes import ExecutionContext, Outcome

Executor = Callable[["ExecutionContext"], "Outcome"]
FollowUp = Callable[["AutomationTask", str], None]

# Ordering lanes: within a conversation, a lane's tasks run one at a time in
# creation order, and an unfinished task holds back the ones after it.
LANE_INSTRUCTIONS = "instructions"
LANE_OUTBOUND = "outbound"


class Targets(Protocol):
    """Where an outbound kind's tasks go, as the edge that reaches them knows it."""

    def present(self, *, now: int) -> QuerySet:
        """A subquery of the ``target_client_id`` values that can take a task at ``now``."""

    def is_present(self, *, client_id: str) -> bool:
        """Whether ``client_id`` can take a task now."""


@dataclass(frozen=True)
class ApprovalRequirement:
    """A permission an operator needs to approve a task, and why, in words the refusal shows."""

    permission: str  # "app_label.codename", as ``User.has_perm`` takes it
    why: str  # "shell.run runs code"


class UnknownKind(LookupError):
    pass


class DuplicateKind(ValueError):
    pass


def always(task: AutomationTask) -> bool:
    return True


@dataclass(frozen=True)
class StoryHeading:
    """How a task is named in a conversation's story, and the other conversation it links to, if any."""

    text: str
    direction: str = ""  # "in" (from the other conversation) or "out" (to it); "" when there is none
    other_conversation_id: int | None = None


@dataclass(frozen=True)
class Detail:
    """One line of a kind's own section on a task's page: a label, a text, and the conversation it names."""

    label: str
    text: str
    conversation_id: int | None = None
    is_long: bool = False  # shown as a block of text rather than inline


@dataclass(frozen=True)
class KindDisplay:
    """How the console shows a task of a kind. Everything has a default, so a kind may set none of it.

    - ``noun``: what the story calls one of its tasks ("renewal"); the kind's name when empty;
    - ``is_block``: its tasks run a message's blocks, and their payload is the
      block's tool call (``tool``, ``target``, ``params``): the story shows them
      within their message rather than as entries of their own, counts them as
      the message's instructions in what the conversation waits on, and a task's
      page shows the call it runs;
    - ``heading(task, conversation_id)``: its ``StoryHeading`` in the story of
      ``conversation_id``, when it is more than ``noun``;
    - ``is_shown_to_sender``: its tasks also appear in the story of the
      conversation whose message created them (``task.message``), as mail sent;
    - ``details(task)``: the lines of its own section on a task's page, titled ``details_title``.
    """

    noun: str = ""
    is_block: bool = False
    heading: Callable[[AutomationTask, int], StoryHeading] | None = None
    is_shown_to_sender: bool = False
    details_title: str = ""
    details: Callable[[AutomationTask], list[Detail]] | None = None


@dataclass(frozen=True)
class KindSpec:
    name: str
    lane: str | None
    is_idempotent: Callable[[AutomationTask], bool]
    targets: Targets | None = None
    is_guarded: bool = False
    executor: Executor | None = None
    follow_up: FollowUp | None = None
    display: KindDisplay = KindDisplay()
    approval_requirement: Callable[[AutomationTask], ApprovalRequirement | None] | None = None

    @property
    def is_outbound(self) -> bool:
        return self.targets is not None


class KindRegistry(Registry[KindSpec]):
    what = "task kind"
    duplicate_error = DuplicateKind
    unknown_error = UnknownKind
    unknown_format = "unknown task kind {key!r}; registered: {known}"

    def runnable(self) -> list[str]:
        """Kinds with an executor: the only ones the dispatcher claims."""
        return sorted(spec.name for spec in self if spec.executor is not None)

    def display(self, name: str) -> KindDisplay:
        """How the console shows a task of kind ``name``; a kind no longer registered gets the defaults."""
        spec = self._entries.get(name)
        return spec.display if spec is not None else KindDisplay()

    def noun(self, name: str) -> str:
        """What the story calls a task of kind ``name``."""
        return self.display(name).noun or name

    def named(self, wanted: Callable[[KindSpec], bool]) -> list[str]:
        """The kinds whose spec is ``wanted``, for a query's ``kind__in``."""
        return sorted(spec.name for spec in self if wanted(spec))

    def follow_up(self, task: AutomationTask, *, actor: str) -> None:
        """Run the follow-up of the task's kind, if it has one (see the module docstring)."""
        if follow_up := self.get(task.kind).follow_up:
            follow_up(task, actor)

    def approval_requirement(self, task: AutomationTask) -> ApprovalRequirement | None:
        """What approving ``task`` needs beyond the change permission (see the module docstring), or None."""
        spec = self.get(task.kind)
        return spec.approval_requirement(task) if spec.approval_requirement else None


kinds = KindRegistry()
