import json
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import Q

from automation.permissions import APPROVE_CODE_CODENAME


def new_task_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Lease:
    """One lease of one task (SPEC §4.4): who holds it, and its lease token.

    ``token`` is fresh at every lease (``new_lease_token``), so two threads of
    one process, two claims in the same millisecond, or a task leased again
    after a reclaim hold different leases; every write of a held task is
    conditioned on it. ``owner`` names the dispatcher process, for people and logs.
    """

    owner: str
    token: int

    def __str__(self) -> str:
        return f"{self.owner}#{self.token:016x}"


def new_lease_token() -> int:
    """A lease token: a random positive 63-bit value (a signed 64-bit column holds it on every database).

    Compared for equality only, never ordered: a write of a held task is
    conditioned on the row still carrying this token, so no newer lease need
    compare greater than an older one, only differ from it."""
    return secrets.randbits(63) or 1


def _came_from(model: str) -> models.ForeignKey:
    """A task's link to where it came from: optional, and cleared (the task kept) when that row is deleted."""
    return models.ForeignKey(model, on_delete=models.SET_NULL, null=True, blank=True, related_name="tasks")


class TaskStatus(models.TextChoices):
    # Waiting to be claimed once execute_after has passed.
    PENDING = "pending", "Pending"
    # Claimed by a dispatcher (lease_owner) until lease_until; not started yet.
    LEASED = "leased", "Leased"
    # Its executor is running under the lease; the worker renews the lease.
    RUNNING = "running", "Running"
    # A retryable failure with attempts left; due again at execute_after.
    RETRY_WAIT = "retry_wait", "Waiting to retry"
    # Done; result_json holds the executor's result. Terminal.
    SUCCEEDED = "succeeded", "Succeeded"
    # A terminal failure, attempts used up, or rejected by an operator. Terminal.
    FAILED = "failed", "Failed"
    # Held for operator approval; never advances by itself.
    BLOCKED = "blocked", "Blocked"
    # Ended by an operator. Terminal.
    CANCELLED = "cancelled", "Cancelled"


class FinishReason(models.TextChoices):
    """Why a task ended, kept apart from its SPEC status (§2.2), which it refines.

    Only a decision is stored: a ``failed`` task with no reason is a fault.
    """

    # An operator (or a policy) said no to a held instruction: blocked -> failed.
    REJECTED = "rejected", "Rejected"


class Outcome(models.TextChoices):
    """How a finished task ended, as the console and /metrics tell them apart."""

    SUCCEEDED = "succeeded", "Succeeded"
    # A fault: a tool error, an interrupted run, a refused delivery, attempts used up.
    FAULT = "fault", "Failed (fault)"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


def task_outcome(status: str, finish_reason: str | None) -> str:
    """The ``Outcome`` of a task in ``status`` with ``finish_reason``; "" while it is open."""
    if status == TaskStatus.FAILED:
        return Outcome.REJECTED if finish_reason == FinishReason.REJECTED else Outcome.FAULT
    if status in (TaskStatus.SUCCEEDED, TaskStatus.CANCELLED):
        return status
    return ""


TERMINAL_STATUSES = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED})
LEASE_HOLDING_STATUSES = frozenset({TaskStatus.LEASED, TaskStatus.RUNNING})
OPEN_STATUSES = frozenset(set(TaskStatus.values) - TERMINAL_STATUSES)
CLAIMABLE_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.RETRY_WAIT})


ROUTING_FIELDS = frozenset({"target_client_id", "target_platform", "target_conversation_id"})


class AutomationTask(models.Model):
    """One unit of work for the dispatcher (SPEC §2.1). Times are epoch milliseconds.

    Status changes only through ``automation.services.transitions``.
    """

    task_id = models.CharField(primary_key=True, max_length=64, default=new_task_id)
    kind = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=TaskStatus.choices)
    priority = models.IntegerField(default=0)
    dedupe_key = models.CharField(max_length=255, null=True, blank=True, unique=True)
    payload_json = models.TextField(default="{}")
    result_json = models.TextField(null=True, blank=True)

    # Routing: set at creation from the conversation's latest link, never
    # cleared; transitions refuse to write these (ROUTING_FIELDS), and only
    # the logged re-target service (task_retarget) moves them.
    target_client_id = models.CharField(max_length=64, null=True, blank=True)
    target_platform = models.CharField(max_length=16, null=True, blank=True)
    target_conversation_id = models.CharField(
        max_length=255, null=True, blank=True, help_text="The platform's conversation id."
    )

    execute_after = models.BigIntegerField()
    attempt_count = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField()
    # Since when (epoch ms) the task has waited for a part of the server (the database, the channel
    # layer) that did not answer; such waits use no attempt (SPEC §4). Cleared when a run ends otherwise.
    part_away_since = models.BigIntegerField(null=True, blank=True)
    lease_owner = models.CharField(max_length=128, null=True, blank=True)
    lease_until = models.BigIntegerField(null=True, blank=True)
    # The random token of the current lease (``Lease``): set by the claim,
    # cleared with the lease; a held task's every change is conditioned on it.
    lease_token = models.BigIntegerField(null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    # Why a failed task ended when it was a decision, not a fault (FinishReason);
    # set by the reject transition, cleared by an operator's retry.
    finish_reason = models.CharField(max_length=16, null=True, blank=True, choices=FinishReason.choices)

    # Operator retries so far: each starts a new series of attempts
    # (attempt_count counts again from 0), so the console reads
    # "run 1 of 3, series 2".
    retry_count = models.PositiveIntegerField(default=0)

    # Approval (SPEC §2.2). A task created ``blocked`` needs an operator's
    # approval before it runs, and so does every later run: a retry of a
    # task never approved goes back to ``blocked``; a retry of an approved one
    # is a new approval by the retrier (``automation.services.operator``
    # checks the permission), who is then recorded here.
    needs_approval = models.BooleanField(default=False)
    approved_by = models.CharField(max_length=150, null=True, blank=True)
    approved_at = models.BigIntegerField(null=True, blank=True, help_text="Epoch milliseconds.")

    # Ordering within a conversation (SPEC §3, §4): tasks of one lane run one
    # at a time in `sequence` order; see automation.kinds.
    lane = models.CharField(max_length=32, null=True, blank=True)
    sequence = models.BigIntegerField(help_text="Creation order, in nanoseconds since the epoch.")

    created_at = models.BigIntegerField()
    updated_at = models.BigIntegerField()
    started_at = models.BigIntegerField(null=True, blank=True)
    finished_at = models.BigIntegerField(null=True, blank=True)

    conversation = _came_from("conversations.Conversation")
    message = _came_from("conversations.Message")
    instruction = _came_from("ingest.Instruction")

    class Meta:
        db_table = "automation_tasks"
        # Approving a task whose tool runs code (``shell.run``, an MCP tool not
        # marked read-only) needs this besides the change permission: such a
        # command runs with the server user's rights (see docs/security.md).
        # Superusers have it, as every permission.
        permissions = [(APPROVE_CODE_CODENAME, "Can approve tools that run code")]
        indexes = [
            models.Index(fields=["status", "execute_after"], name="task_status_due_idx"),
            models.Index(
                fields=["kind", "status", "execute_after"], name="task_kind_status_due_idx"
            ),
            models.Index(
                fields=["target_client_id", "target_platform", "status", "execute_after"],
                name="task_target_status_due_idx",
            ),
            models.Index(fields=["conversation", "lane", "sequence"], name="task_lane_order_idx"),
            # The claim's "an earlier task of the lane is unfinished" (claim_rules.earlier_in_lane):
            # only the open tasks, so its cost does not grow with the conversation's history.
            models.Index(
                fields=["conversation", "lane", "sequence"], name="task_lane_open_idx",
                condition=Q(status__in=sorted(OPEN_STATUSES)),
            ),
            # The admin's list order (newest first).
            models.Index(fields=["created_at", "task_id"], name="task_created_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=TaskStatus.values), name="task_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status__in=LEASE_HOLDING_STATUSES) | Q(lease_owner__isnull=False),
                name="task_in_flight_has_lease_owner",
            ),
            # The dispatcher's limits, enforced by the database so that they hold
            # across any number of dispatcher processes (SPEC §4.1): at most one
            # outbound task in flight per target...
            models.UniqueConstraint(
                fields=["target_client_id", "target_platform"],
                condition=Q(status__in=LEASE_HOLDING_STATUSES, target_client_id__isnull=False),
                name="task_one_in_flight_per_target",
            ),
            # ...and at most one task in flight per conversation lane.
            models.UniqueConstraint(
                fields=["conversation", "lane"],
                condition=Q(
                    status__in=LEASE_HOLDING_STATUSES, conversation__isnull=False, lane__isnull=False
                ),
                name="task_one_in_flight_per_lane",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.task_id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def outcome(self) -> str:
        return task_outcome(self.status, self.finish_reason)

    @property
    def lease(self) -> Lease | None:
        """The lease that holds the task now, or None."""
        if self.lease_owner is None or self.lease_token is None:
            return None
        return Lease(owner=self.lease_owner, token=self.lease_token)

    @property
    def is_awaiting_approval_again(self) -> bool:
        """Whether an operator's retry puts the task back to ``blocked``: it needs approval and never had it."""
        return self.needs_approval and self.approved_at is None

    @property
    def has_route(self) -> bool:
        return bool(self.target_client_id and self.target_platform)

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.payload_json)


class DispatcherState(models.Model):
    """The one row of dispatcher-wide state: the global pause, which must be one switch for every loop.

    Liveness is not here: each loop's heartbeat is its ``DispatcherWorker`` row.
    """

    is_paused = models.BooleanField(default=False)
    paused_by = models.CharField(max_length=150, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="dispatcher_state_singleton")]

    def __str__(self) -> str:
        return "dispatcher (paused)" if self.is_paused else "dispatcher"


class DispatcherWorker(models.Model):
    """A dispatcher loop at work (``automation.loop``): every one claims and runs tasks.

    Its row is its heartbeat, renewed every half tick; a row whose heartbeat
    is older than the stall time (three ticks, at least 10 s) is a loop that
    died or hangs, and the next live loop deletes it. Its tasks need no
    hand-over: each goes back by its own lease (SPEC §4.4).
    """

    owner = models.CharField(max_length=128, unique=True, help_text="The loop's dispatcher: host:pid:suffix.")
    server = models.CharField(
        max_length=128, help_text="The server it runs for (CONDUCTOR_SERVER_NAME): a scheduled loop "
        "returns when an older live loop of its server runs.",
    )
    started_at = models.BigIntegerField(help_text="Epoch milliseconds.")
    heartbeat_at = models.BigIntegerField(help_text="Epoch milliseconds.")
    key_fingerprint = models.CharField(
        max_length=16, blank=True, default="",
        help_text="Which SECRET_KEY its server signs with (core.keys): one that another server does not "
        "accept is named on /healthz and the overview. Empty: not told.",
    )

    class Meta:
        indexes = [models.Index(fields=["server", "started_at"], name="dispatcher_worker_server_idx")]

    def __str__(self) -> str:
        return f"{self.owner} ({self.server})"


class KindPause(models.Model):
    """A task kind the dispatcher does not claim while this row exists (the overview's pause per kind)."""

    kind = models.CharField(max_length=64, unique=True)
    paused_by = models.CharField(max_length=150)
    paused_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.kind} (paused by {self.paused_by})"


class LeaseLoss(models.Model):
    """How often a worker found, at a write, that its lease no longer held its task (SPEC §4.4), per kind.

    A counter no prune touches (``/metrics``: ``conductor_leases_lost_total``).
    Healthy, it stays 0: a task cancelled by an operator under its worker is
    not counted, everything else is (a lease that expired under a live
    worker, a task run by two workers).
    """

    kind = models.CharField(max_length=64, unique=True)
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        db_table = "automation_lease_losses"

    def __str__(self) -> str:
        return f"{self.kind}: {self.count} lost"


class TaskEvent(models.Model):
    """One entry in a task's timeline: a status change or a lease action.

    ``actor`` is the dispatcher's lease owner, ``ingest``, or an operator's username.
    """

    task = models.ForeignKey(AutomationTask, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=32)
    status_from = models.CharField(max_length=16, null=True, blank=True)
    status_to = models.CharField(max_length=16)
    actor = models.CharField(max_length=150)
    at = models.BigIntegerField(help_text="Epoch milliseconds.")
    jitter_ms = models.PositiveIntegerField(null=True, blank=True)
    backoff_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "automation_task_events"
        indexes = [models.Index(fields=["task", "at"], name="task_event_timeline_idx")]
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.action}: {self.status_from} -> {self.status_to} by {self.actor}"
