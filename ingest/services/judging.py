"""Judging the blocks of final messages: which become tasks, in which state, and why the others are refused.

The one rule set of ingest (SPEC §5, §5.2), read-only: a ``Judgement`` reads
what the rules need for a whole batch at once (the conversations' hourly
budgets, the tool policies that can apply), then judges each block in the
messages' order without another query. The rules, in order: a block that did
not parse is refused with its parse error; an unknown tool, params that do not
fit the tool's schema or its own check, a denied tool, and a block past the
conversation's hourly budget are refused; a tool that needs approval starts
``blocked``; any other starts ``pending``. Only accepted blocks use budget.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from automation.models import TaskStatus
from ingest.blocks import Block
from conversations.models import Conversation
from ingest.models import Instruction
from ingest.selectors.policies import ToolPolicies, tool_policies_current, tool_policy_version
from tools.registry import DEFAULT_TARGET, Policy, UnknownTool, tools


@dataclass(frozen=True)
class Verdict:
    """A block's fate: the status its task starts in, or None and why it was refused."""

    status: str | None
    error: str = ""

    @property
    def is_accepted(self) -> bool:
        return self.status is not None


def hourly_budgets(conversation_pks: Iterable[int], now: dt.datetime) -> tuple[dict[int, int], Any]:
    """Valid blocks each conversation may still queue in the rolling hour (SPEC §5), and the tool
    policies' version token (``tool_policies_current``), in one query."""
    conversation_pks = list(conversation_pks)
    used = (
        Instruction.objects.filter(message__conversation=OuterRef("pk"), created_at__gte=now - dt.timedelta(hours=1))
        .exclude(status=Instruction.Status.REJECTED)
        .order_by()
        .values("message__conversation")
        .annotate(used=Count("pk"))
        .values("used")
    )
    rows = list(
        Conversation.objects.filter(pk__in=conversation_pks)
        .annotate(used=Coalesce(Subquery(used), 0), policy_version=tool_policy_version())
        .values_list("pk", "used", "policy_version")
    )
    limit = settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR
    used_of = {pk: count for pk, count, _ in rows}
    version = rows[0][2] if rows else None
    return {pk: limit - used_of.get(pk, 0) for pk in conversation_pks}, version


class Judgement:
    """The rules' inputs for a batch of messages, read at once (one query, two when the tool policies
    changed since this process last read them; none without a valid block), and the judging of
    their blocks."""

    def __init__(self, *, budgets: dict[int, int], policies: ToolPolicies) -> None:
        self._budgets = budgets
        self._policies = policies

    @classmethod
    def load(
        cls, *, conversation_pks: Iterable[int], client_pks: Iterable[int | None], blocks: Iterable[Block],
        now: dt.datetime,
    ) -> Judgement:
        conversation_pks = set(conversation_pks)
        # Only a block that parsed can use budget or have a policy: without one, nothing to read.
        valid = [block for block in blocks if block.is_valid]
        if not valid:
            return cls(budgets={}, policies=ToolPolicies([]))
        budgets, policy_version = hourly_budgets(conversation_pks, now)
        return cls(
            budgets=budgets,
            policies=tool_policies_current(
                version=policy_version, tools={block.tool for block in valid},
                targets={block.target for block in valid}, client_pks=set(client_pks),
                conversation_pks=conversation_pks,
            ),
        )

    def judge(self, block: Block, *, conversation_pk: int, client_pk: int | None) -> Verdict:
        """The verdict on ``block``, the next block of this conversation in arrival order."""
        if block.error:
            return Verdict(None, block.error)
        try:
            spec = tools.get(block.tool, target=block.target)
        except UnknownTool as exc:
            return Verdict(None, str(exc))
        if error := spec.call_error(block.params or {}, conversation_id=conversation_pk):
            return Verdict(None, f"invalid params for {block.tool}: {error}")
        policy = self._policies.policy_for(
            tool=block.tool, target=block.target, client_pk=client_pk, conversation_pk=conversation_pk,
        )
        if policy == Policy.DENY:
            name = block.tool if spec.target == DEFAULT_TARGET else spec.full_name
            return Verdict(None, f"{name} is denied by policy")
        if self._budgets[conversation_pk] <= 0:
            limit = settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR
            return Verdict(None, (
                f"rate limit: this conversation already sent {limit} valid blocks in the last hour "
                "(CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR); wait before sending more"
            ))
        self._budgets[conversation_pk] -= 1
        return Verdict(TaskStatus.BLOCKED if policy == Policy.APPROVE else TaskStatus.PENDING)
