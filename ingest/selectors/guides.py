"""Reads of the tool guide (SPEC §5.5): the facts a conversation's guide says, and the guide they render."""

from __future__ import annotations

from django.conf import settings

from conversations.models import DEFAULT_OWNER, Conversation, ConversationLink
from conversations.selectors import mail_handles
from ingest.blocks import MAX_BLOCK_BYTES, MAX_BLOCKS
from ingest.guide import MAX_HANDLES_SHOWN, GuideFacts, GuideTool, ToolGuide, tool_guide_render
from ingest.models import PluginClient
from ingest.selectors.policies import ToolPolicies
from mcp_servers.selectors import mcp_tool_specs
from tools.registry import Policy, tools


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
