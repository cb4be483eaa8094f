"""Reads of tool policies: which ``ToolPolicy`` row applies to a block, and whether it allows the network."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from django.db.models import Q, Subquery

from conversations.models import Message
from ingest.models import ToolPolicy, ToolPolicyVersion
from tools.registry import DEFAULT_TARGET, tools


def tool_policy_for(
    *, tool: str, client_pk: int | None, conversation_pk: int | None, target: str = DEFAULT_TARGET
) -> str:
    """The policy that applies to ``target::tool`` for this client and conversation.

    The most specific ``ToolPolicy`` row wins; without one, the tool's default.
    Raises ``UnknownTool`` for a tool that is not registered.
    """
    return ToolPolicies.load(
        tools=[tool] if target == DEFAULT_TARGET else [], targets=[target] if target != DEFAULT_TARGET else [],
        client_pks=[client_pk], conversation_pks=[conversation_pk],
    ).policy_for(tool=tool, target=target, client_pk=client_pk, conversation_pk=conversation_pk)


class BlockPolicy(NamedTuple):
    """What applies now to a block: its policy, and whether its command may use the network."""

    policy: str
    allow_network: bool


def block_policy_now(
    *, tool: str, target: str, message_id: int | None, conversation_pk: int | None
) -> BlockPolicy:
    """The policy that applies now to a block of ``message_id`` (its client's and conversation's),
    and whether the row that decides it allows the network (``ToolPolicy.allow_network``).

    One query reads the message's client and the policies' version token; the
    rows come from this process's copy at that version (``tool_policies_current``).
    Raises ``UnknownTool`` for a tool that is not registered.
    """
    client_pk, version = (
        Message.objects.filter(pk=message_id).values_list("client_id", tool_policy_version()).first()
        if message_id is not None else None
    ) or (None, None)
    policies = tool_policies_current(
        version=version, tools=[tool] if target == DEFAULT_TARGET else [],
        targets=[target] if target != DEFAULT_TARGET else [], client_pks=[client_pk], conversation_pks=[conversation_pk],
    )
    scope = {"tool": tool, "target": target, "client_pk": client_pk, "conversation_pk": conversation_pk}
    return BlockPolicy(policies.policy_for(**scope), policies.network_for(**scope))


# A block as its network is decided: (tool, target, client pk, conversation pk).
BlockScope = tuple[str, str, "int | None", "int | None"]


def networks_allowed(*, blocks: Iterable[BlockScope]) -> dict[BlockScope, bool]:
    """Whether the policy that applies now lets each block's command use the network
    (``ToolPolicy.allow_network``), for the blocks of a tool whose network a policy decides
    (``ToolSpec.network_by_policy``); the others are left out. One query, none without such a block.
    """
    wanted = {
        block for block in blocks
        if block[1] == DEFAULT_TARGET and block[0] in tools and tools.get(block[0]).network_by_policy
    }
    if not wanted:
        return {}
    policies = ToolPolicies.load(
        tools={block[0] for block in wanted}, client_pks={block[2] for block in wanted},
        conversation_pks={block[3] for block in wanted},
    )
    return {
        block: policies.network_for(tool=block[0], target=block[1], client_pk=block[2], conversation_pk=block[3])
        for block in wanted
    }


class ToolPolicies:
    """The ``ToolPolicy`` rows that can apply to some tools, clients and conversations, read at once.

    ``tools`` are names of ``conductor`` tools; ``targets`` MCP servers, all
    of whose rows are read. ``policy_for`` answers as ``tool_policy_for``
    would, for any of them, without a query.
    """

    # What each row is read as: the fields ``__init__`` takes, in order.
    FIELDS = ("target", "tool", "policy", "client_id", "conversation_id", "allow_network")

    def __init__(self, rows: list[tuple[str, str, str, int | None, int | None, bool]]) -> None:
        self._rows: dict[tuple[str, str], list[tuple[str, int | None, int | None, bool]]] = {}
        for target, tool, policy, client_pk, conversation_pk, allow_network in rows:
            self._rows.setdefault((target, tool), []).append((policy, client_pk, conversation_pk, allow_network))

    @classmethod
    def load(
        cls, *, tools: Iterable[str], client_pks: Iterable[int | None], conversation_pks: Iterable[int | None],
        targets: Iterable[str] = (),
    ) -> ToolPolicies:
        client_pks = [pk for pk in client_pks if pk is not None]
        conversation_pks = [pk for pk in conversation_pks if pk is not None]
        rows = ToolPolicy.objects.filter(
            Q(client__isnull=True) | Q(client_id__in=client_pks),
            Q(conversation__isnull=True) | Q(conversation_id__in=conversation_pks),
            Q(target=DEFAULT_TARGET, tool__in=set(tools)) | Q(target__in=set(targets) - {DEFAULT_TARGET}),
        ).values_list(*cls.FIELDS)
        return cls(list(rows))

    def policy_for(
        self, *, tool: str, client_pk: int | None, conversation_pk: int | None, target: str = DEFAULT_TARGET,
        default: str | None = None,
    ) -> str:
        """Raises ``UnknownTool`` for a tool that is not registered (unless ``default`` is given)."""
        if default is None:
            default = tools.get(tool, target=target).default_policy
        row = self._winning(tool=tool, target=target, client_pk=client_pk, conversation_pk=conversation_pk)
        return row[0] if row is not None else default

    def network_for(
        self, *, tool: str, client_pk: int | None, conversation_pk: int | None, target: str = DEFAULT_TARGET
    ) -> bool:
        """Whether the row deciding ``policy_for`` allows the network; without one, it does not."""
        row = self._winning(tool=tool, target=target, client_pk=client_pk, conversation_pk=conversation_pk)
        return row is not None and row[3]

    def _winning(
        self, *, tool: str, target: str, client_pk: int | None, conversation_pk: int | None
    ) -> tuple[str, int | None, int | None, bool] | None:
        """The most specific row that applies (see ``ToolPolicy``), or None."""
        rows = [
            (row, is_tool_row)
            for is_tool_row, key in ((True, (target, tool)), (False, (target, "")))
            if target != DEFAULT_TARGET or is_tool_row
            for row in self._rows.get(key, ())
            if row[1] in (None, client_pk) and row[2] in (None, conversation_pk)
        ]
        if not rows:
            return None
        return max(rows, key=lambda ranked: (ranked[0][2] is not None, ranked[0][1] is not None, ranked[1]))[0]


# At most this many ToolPolicy rows are kept in memory; past it, each batch reads the rows it
# can use, as without a cache.
MAX_CACHED_POLICIES = 2000
# The version token the cached policies were read at, and them (None: too many rows to keep).
_cached_policies: tuple[str, ToolPolicies | None] | None = None


def tool_policy_version() -> Subquery:
    """The policies' version token (``ToolPolicyVersion``), as an expression: read with a query the
    caller makes anyway, it costs no statement of its own."""
    return Subquery(ToolPolicyVersion.objects.filter(pk=1).values("token")[:1])


def tool_policies_current(
    *, version: Any, tools: Iterable[str], client_pks: Iterable[int | None], conversation_pks: Iterable[int | None],
    targets: Iterable[str] = (),
) -> ToolPolicies:
    """``ToolPolicies.load`` for these, from this process's copy of every row when ``version`` (read
    by the caller with its other reads) is the one the copy was read at; otherwise every row is
    read again (one query) and kept under ``version``.

    A policy changed in any process changes the token in the same transaction, so a batch whose
    transaction sees the change sees a new token and reads the rows after it: never older rows
    than the token it read. Without a token (the row is missing), or with more rows than
    ``MAX_CACHED_POLICIES``, nothing is kept and the rows that can apply are read as before.
    """
    global _cached_policies
    if version is not None:
        version = str(version)
        if _cached_policies is not None and _cached_policies[0] == version:
            policies = _cached_policies[1]
        else:
            rows = list(ToolPolicy.objects.order_by().values_list(*ToolPolicies.FIELDS)[:MAX_CACHED_POLICIES + 1])
            policies = ToolPolicies(rows) if len(rows) <= MAX_CACHED_POLICIES else None
            _cached_policies = (version, policies)
        if policies is not None:
            return policies
    return ToolPolicies.load(tools=tools, client_pks=client_pks, conversation_pks=conversation_pks, targets=targets)
