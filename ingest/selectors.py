"""Reads of the ingest app."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models import Case, Count, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from automation.models import AutomationTask
from conversations.models import DEFAULT_OWNER, Conversation, ConversationLink, Message
from conversations.selectors import mail_handles
from core.clock import datetime_from_ms
from ingest.blocks import MAX_BLOCK_BYTES, MAX_BLOCKS
from ingest.guide import MAX_HANDLES_SHOWN, GuideFacts, GuideTool, ToolGuide, tool_guide_render
from ingest.models import DeliveryRequest, Instruction, PluginClient
from ingest.policy_selectors import ToolPolicies
from ingest.tokens import HASH_PREFIX, token_matches
from mcp_servers.selectors import mcp_tool_specs
from platforms import platforms
from tools.registry import Policy, tools

# A socket that died without a close (its server killed) stops counting after
# this long at most, whatever the ping interval (SPEC §4).
PRESENCE_MAX_SECONDS = 60.0


def presence_window() -> dt.timedelta:
    """How long a client counts as connected after it was last seen: 2 × the ping interval."""
    return dt.timedelta(
        seconds=min(2 * settings.CONDUCTOR_PING_INTERVAL_SECONDS, PRESENCE_MAX_SECONDS)
    )


def plugin_clients_connected(*, now: dt.datetime | None = None) -> QuerySet[PluginClient]:
    now = now or timezone.now()
    return PluginClient.objects.filter(
        enabled=True, connected=True, last_seen_at__gte=now - presence_window()
    )


def plugin_client_is_connected(*, client_id: str, now: dt.datetime | None = None) -> bool:
    return plugin_clients_connected(now=now).filter(client_id=client_id).exists()


class PluginTargets:
    """The ``targets`` of outbound kinds (``automation.kinds.Targets``): plugin clients.

    A client can take a task while it is enabled and connected and was seen
    within the presence window.
    """

    def present(self, *, now: int) -> QuerySet:
        return plugin_clients_connected(now=datetime_from_ms(now)).values("client_id")

    def is_present(self, *, client_id: str) -> bool:
        return plugin_client_is_connected(client_id=client_id)


plugin_targets = PluginTargets()


@dataclass(frozen=True)
class DeliveryRoute:
    """What a delivery to a conversation through one client needs to know.

    ``client`` is None when no client has that id; ``link`` is None when the
    conversation was never seen through it; ``owner`` and ``methods`` are the
    conversation's ("" when it is gone).
    """

    client: PluginClient | None
    owner: str
    methods: str
    link: ConversationLink | None


def delivery_route_for(*, conversation_id: int, client_id: str) -> DeliveryRoute:
    """The client, the conversation's owner and delivery methods, and their link: one query when the link exists."""
    link = (
        ConversationLink.objects.select_related("client", "conversation")
        .filter(conversation_id=conversation_id, client__client_id=client_id).first()
    )
    if link is not None:
        return DeliveryRoute(
            client=link.client, owner=link.conversation.owner, methods=link.conversation.delivery_methods, link=link
        )
    owner, methods = (
        Conversation.objects.filter(pk=conversation_id).values_list("owner", "delivery_methods").first() or ("", "")
    )
    return DeliveryRoute(
        client=PluginClient.objects.filter(client_id=client_id).first(), owner=owner, methods=methods, link=None
    )


def plugin_client_exists(*, client_id: str) -> bool:
    """Whether a client (enabled or revoked) has this id."""
    return PluginClient.objects.filter(client_id=client_id).exists()


def plugin_client_name_suggest() -> str:
    """A name for a new client that is not taken yet: "browser 1", "browser 2", ..."""
    taken = set(PluginClient.objects.filter(client_id__startswith="browser-").values_list("client_id", flat=True))
    number = 1
    while f"browser-{number}" in taken:
        number += 1
    return f"browser {number}"


def plugin_client_authenticate(*, client_id: str, token: str) -> PluginClient | None:
    """The enabled client with this id and token, or None. Unknown ids cost the same hash."""
    client = PluginClient.objects.filter(client_id=client_id, enabled=True).first()
    stored = client.token_hash if client else HASH_PREFIX + "0" * 64
    if token_matches(token, stored) and client is not None:
        return client
    return None


@dataclass(frozen=True)
class LastDelivery:
    """A delivery request and the plugin's answer, without the answer's body."""

    request_id: str
    task_id: str
    sent_at: int  # epoch ms
    answered_at: int | None  # epoch ms; None while unanswered
    ok: Any  # as the answer said: True or False (None while unanswered)
    status: Any
    error: Any
    error_code: Any
    method: str  # SPEC §6.1: "http" or "dom"


@dataclass(frozen=True)
class PlatformActivity:
    """A client's latest capture and latest delivery on one platform, for its admin page."""

    platform: str
    last_capture: Message | None
    last_delivery: LastDelivery | None


def _latest_per_platform(queryset: QuerySet, *, platform_field: str, order: tuple[str, ...]) -> QuerySet:
    """``queryset``'s first row in ``order`` for each platform, in one statement.

    One subquery per platform, each a short walk of an index newest first,
    instead of a scan of everything the client ever sent.
    """
    latest = Q()
    for platform in platforms.names():
        newest = queryset.filter(**{platform_field: platform}).order_by(*order).values("pk")[:1]
        latest |= Q(pk=Subquery(newest))
    return queryset.filter(latest)


def plugin_client_activity(*, client_pk: int) -> list[PlatformActivity]:
    """Per platform, the client's latest captured message and latest delivery request. Two queries."""
    captures = _latest_per_platform(
        Message.objects.filter(client_id=client_pk, source=Message.Source.PLUGIN),
        platform_field="conversation__platform", order=("-received_at", "-pk"),
    ).select_related("conversation").only(
        "role", "capture", "received_at", "conversation__platform", "conversation__remote_id",
        "conversation__title",
    )
    deliveries = _latest_per_platform(
        DeliveryRequest.objects.filter(client_id=client_pk),
        platform_field="task__target_platform", order=("-sent_at", "-pk"),
    ).values(
        "request_id", "task_id", "method", "sent_at", "answered_at", "task__target_platform",
        "result__ok", "result__status", "result__error", "result__error_code",
    )
    capture_of = {message.conversation.platform: message for message in captures}
    delivery_of = {
        row["task__target_platform"]: LastDelivery(
            request_id=row["request_id"], task_id=row["task_id"], sent_at=row["sent_at"],
            answered_at=row["answered_at"], ok=row["result__ok"], status=row["result__status"],
            error=row["result__error"], error_code=row["result__error_code"], method=row["method"],
        )
        for row in deliveries
    }
    return [
        PlatformActivity(platform=platform, last_capture=capture_of.get(platform),
                         last_delivery=delivery_of.get(platform))
        for platform in platforms.names()
    ]


class DeliveryState:
    """Where a delivery request stands, for ``delivery_request_counts``."""

    DELIVERED = "delivered"  # its answer was read as delivered
    ANSWERED = "answered"  # answered, not delivered (refused, failed, or abandoned when the socket closed)
    UNANSWERED = "unanswered"  # no answer yet, or none before its executor stopped waiting


def delivery_request_counts() -> dict[tuple[str, str, str | None], int]:
    """How many delivery requests there are: ``{(method, state, error_code): count}``.

    ``state`` is a ``DeliveryState``; ``error_code`` is the answer's (SPEC §6),
    None without one. One aggregated query. Requests go with their task, so
    ``prune`` takes them away with it.
    """
    state = Case(
        When(delivered=True, then=Value(DeliveryState.DELIVERED)),
        When(answered_at__isnull=True, then=Value(DeliveryState.UNANSWERED)),
        default=Value(DeliveryState.ANSWERED),
    )
    rows = (
        DeliveryRequest.objects.annotate(state=state, error_code=KeyTextTransform("error_code", "result"))
        .values_list("method", "state", "error_code")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {(method, state, error_code): n for method, state, error_code, n in rows}


def instruction_counts_by_status() -> dict[str, int]:
    """How many instructions there are in each status (only those with any). One query."""
    rows = Instruction.objects.values_list("status").annotate(n=Count("pk")).order_by()
    return dict(rows)


class BlockRow(NamedTuple):
    """What a block of a message came to, as its delivery reports it."""

    block: int
    label: str
    status: str
    result_json: str | None  # its latest task's; None without a task (a rejected block)
    error: str


def message_block_rows(*, message_id: int | None, instruction_ids: Sequence[int] | None = None) -> list[BlockRow]:
    """Each block of the message (only ``instruction_ids`` when given), in block order. One query:
    a block's result is the one its most recent task stored, read as a sub-select."""
    latest_result = (
        AutomationTask.objects.filter(instruction_id=OuterRef("pk")).order_by("-sequence").values("result_json")[:1]
    )
    instructions = Instruction.objects.filter(message_id=message_id).order_by("block_index")
    if instruction_ids is not None:
        instructions = instructions.filter(pk__in=instruction_ids)
    rows = instructions.only("block_index", "target", "tool", "status", "error").annotate(
        latest_result=Subquery(latest_result)
    )
    return [
        BlockRow(row.block_index, row.label, row.status, row.latest_result, row.error) for row in rows
    ]


def message_clients(*, message_ids: Iterable[int | None]) -> dict[int, int | None]:
    """Each message's plugin client (its pk, or None). One query."""
    ids = {pk for pk in message_ids if pk is not None}
    return dict(Message.objects.filter(pk__in=ids).values_list("pk", "client_id")) if ids else {}


def tool_guide_facts(
    *, platform: str, conversation: Conversation | None = None, client_pk: int | None = None
) -> GuideFacts:
    """What the tool guide of a conversation (or of a new one on ``platform``) says. At most five queries.

    Its tools are Conductor's and those of every enabled MCP server (SPEC §5.5).

    The policies are those ingest would apply to a block of this conversation
    from this client (``ToolPolicies``); denied tools are left out. The mail
    handles are those of the other conversations it can write to: of its
    owner (or of an owner paired with it, ``CONDUCTOR_MAIL_BETWEEN_OWNERS``),
    receiving mail, and seen through a plugin (mail to one never seen has
    nowhere to go). Another owner's handles are never listed.
    """
    mcp_specs = mcp_tool_specs()
    specs = [*tools, *mcp_specs]
    conversation_pk = conversation.pk if conversation is not None else None
    policies = ToolPolicies.load(
        tools=[spec.name for spec in tools], targets={spec.target for spec in mcp_specs},
        client_pks=[client_pk], conversation_pks=[conversation_pk],
    )
    callable_tools = []
    for spec in specs:
        policy = policies.policy_for(
            tool=spec.name, target=spec.target, client_pk=client_pk, conversation_pk=conversation_pk,
            default=spec.default_policy,
        )
        if policy != Policy.DENY:
            callable_tools.append(GuideTool(spec=spec, policy=policy))
    owner = _guide_owner(conversation=conversation, client_pk=client_pk)
    recipients = mail_handles(owner=owner, excluding_id=conversation_pk)
    handles = list(recipients[: MAX_HANDLES_SHOWN + 1])
    more = recipients.count() - MAX_HANDLES_SHOWN if len(handles) > MAX_HANDLES_SHOWN else 0
    return GuideFacts(
        platform=platform,
        tools=tuple(callable_tools),
        mail_handles=tuple(handles[:MAX_HANDLES_SHOWN]),
        more_handles=more,
        max_blocks=MAX_BLOCKS,
        max_block_bytes=MAX_BLOCK_BYTES,
        per_hour=settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR,
        result_max_chars=settings.CONDUCTOR_RESULT_MAX_CHARS,
        owner=owner,
    )


def _guide_owner(*, conversation: Conversation | None, client_pk: int | None) -> str:
    """Whose handles a guide lists: the conversation's owner; for a new or unclaimed one, its client's.

    A conversation not yet seen through a client becomes its first client's
    when that client sends its message, before any block of it runs. With
    neither, the owner a conversation has by default.
    """
    if conversation is not None and conversation.owner:
        return conversation.owner
    if client_pk is not None:
        owner = PluginClient.objects.filter(pk=client_pk).values_list("owner", flat=True).first()
        if owner:
            return owner
    return DEFAULT_OWNER


def conversation_guide_client_pk(*, conversation: Conversation) -> int | None:
    """The plugin client a conversation was last seen through: whose policies its guide follows."""
    return (
        ConversationLink.objects.filter(conversation=conversation)
        .order_by("-last_seen_at", "-pk")
        .values_list("client_id", flat=True)
        .first()
    )


def tool_guide(*, platform: str, conversation: Conversation | None = None, client_pk: int | None = None) -> ToolGuide:
    """The tool guide of a conversation, or of a new one on ``platform`` (SPEC §5.5)."""
    return tool_guide_render(tool_guide_facts(platform=platform, conversation=conversation, client_pk=client_pk))


def plugin_client_pk(*, client_id: str) -> int | None:
    return PluginClient.objects.filter(client_id=client_id).values_list("pk", flat=True).first()


def plugin_client_owner(*, client_pk: int) -> str | None:
    """The owner of plugin client ``client_pk``; None when there is no such client."""
    return PluginClient.objects.filter(pk=client_pk).values_list("owner", flat=True).first()
