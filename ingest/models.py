import hashlib
import uuid

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from conversations.models import DEFAULT_OWNER, MAX_OWNER_CHARS, validate_owner
from mcp_servers.models import McpServer
from tools.registry import DEFAULT_TARGET, Policy, tools


def plugin_group_name(client_pk: int) -> str:
    """Channel-layer group of a client's socket. Built from the primary key:
    group names allow only letters, digits, '-', '_' and '.'."""
    return f"plugin-client.{client_pk}"


def plugin_owner_group_name(owner: str) -> str:
    """Channel-layer group of every socket of ``owner``'s clients: what they are all told
    (the approvals count). An owner holds only lowercase letters, digits, '_', '.' and '-'."""
    return f"plugin-owner.{owner}"


def plugin_view_group_name(owner: str, platform: str, conversation_id: str) -> str:
    """Channel-layer group of the sockets of ``owner``'s clients that look at one conversation (its
    ``instruction.status``). The platform's conversation id may hold any character: it is hashed."""
    digest = hashlib.blake2b(f"{platform}\0{conversation_id}".encode(), digest_size=16).hexdigest()
    return f"plugin-view.{owner}.{digest}"


class PluginClient(models.Model):
    """A browser plugin allowed to open the WebSocket, known by its ``client_id``."""

    client_id = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(r"^[a-z0-9][a-z0-9_.-]*$")],
        help_text="The id the plugin sends in its hello frame.",
    )
    name = models.CharField(max_length=200)
    owner = models.CharField(
        max_length=MAX_OWNER_CHARS, default=DEFAULT_OWNER, validators=[validate_owner],
        help_text="Whose browser this is. A conversation moves only between clients of the same owner, "
        "and its results go only to them.",
    )
    # Only the hash is stored; see ingest/tokens.py. Never log or display it.
    token_hash = models.CharField(max_length=100, editable=False)
    enabled = models.BooleanField(default=True, help_text="A revoked client cannot connect.")
    # Presence (SPEC §4): a client counts as connected while `connected` is set
    # and `last_seen_at` is fresher than the presence window (see selectors).
    connected = models.BooleanField(default=False)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    connection_channel = models.CharField(
        max_length=255, blank=True, help_text="Channel-layer name of the client's current socket."
    )
    # The conversation the client's side panel looks at (its latest status.get since its hello):
    # the only one whose instruction.status it is sent (ingest/panel/push.py).
    viewing_platform = models.CharField(max_length=16, blank=True)
    viewing_conversation_id = models.CharField(max_length=255, blank=True)
    # What the plugin said about itself in its latest hello (SPEC §6).
    plugin_version = models.CharField(max_length=64, blank=True)
    capabilities = models.JSONField(
        default=list, blank=True, help_text="Delivery frames the plugin performs, known names only."
    )
    adapters = models.JSONField(
        default=dict, blank=True, help_text="Platform name -> version of the plugin's adapter for it."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.client_id

    def __repr__(self) -> str:
        return f"<PluginClient {self.client_id}>"

    @property
    def group_name(self) -> str:
        return plugin_group_name(self.pk)

    def has_capability(self, name: str) -> bool:
        """Whether the plugin's latest hello said it performs ``name`` (an ``ingest.protocol.Capability``).

        A client that never said hello has none: nothing can be sent to it anyway.
        """
        return name in (self.capabilities or ())


class Instruction(models.Model):
    """One ```baa block of an assistant message, valid or not."""

    class Status(models.TextChoices):
        # Valid and queued as an instruction.execute task.
        PENDING = "pending", "Pending"
        # Valid, held until an operator approves it (its task is blocked).
        AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
        # Its tool ran and returned a result.
        SUCCEEDED = "succeeded", "Succeeded"
        # Its tool ran and failed, or an operator rejected it.
        FAILED = "failed", "Failed"
        # Never queued: it did not parse, names an unknown tool, is denied or over a limit.
        REJECTED = "rejected", "Rejected"
        # An operator cancelled its task.
        CANCELLED = "cancelled", "Cancelled"

    message = models.ForeignKey(
        "conversations.Message", on_delete=models.CASCADE, related_name="instructions"
    )
    block_index = models.PositiveIntegerField(
        help_text="Position of the block in its message, counting from 1."
    )
    raw_text = models.TextField()
    target = models.CharField(max_length=100, blank=True)
    tool = models.CharField(max_length=100, blank=True)
    params = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=32, choices=Status.choices)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when an operator reopens the finished block (a retry), cleared by the delivery that
    # carries its new result: a follow-up carries exactly the blocks that have it.
    reopened_since_delivery = models.BooleanField(
        default=False, help_text="Retried after it finished: the message's next follow-up delivery carries its new result.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["message", "block_index"], name="instruction_message_block_uniq"
            ),
        ]
        indexes = [
            # The admin's list order (newest first).
            models.Index(fields=["created_at", "id"], name="instruction_created_idx"),
        ]

    def __str__(self) -> str:
        return f"block {self.block_index} of message {self.message_id}: {self.tool or '?'}"

    @property
    def label(self) -> str:
        """``TARGET::TOOL``, or just the tool for Conductor's own target."""
        if self.target and self.target != DEFAULT_TARGET:
            return f"{self.target}::{self.tool}"
        return self.tool


class ToolGuideServed(models.Model):
    """A tool guide (SPEC §5.5) a plugin client asked for, to insert into a chat's composer.

    One row per client, platform, conversation (none for a new conversation)
    and guide version, counted, so asking again does not grow the table; the
    conversation's story shows it, and which version it was.
    """

    client = models.ForeignKey(PluginClient, on_delete=models.CASCADE, related_name="guides_served")
    platform = models.CharField(max_length=16)
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, null=True, blank=True,
        related_name="guides_served",
    )
    version = models.CharField(max_length=32)
    text = models.TextField()
    count = models.PositiveIntegerField(default=1)
    first_served_at = models.DateTimeField()
    last_served_at = models.DateTimeField()

    class Meta:
        verbose_name = "tool guide served"
        verbose_name_plural = "tool guides served"
        constraints = [
            models.UniqueConstraint(
                fields=["client", "platform", "conversation", "version"],
                condition=models.Q(conversation__isnull=False), name="guide_served_conversation_uniq",
            ),
            models.UniqueConstraint(
                fields=["client", "platform", "version"],
                condition=models.Q(conversation__isnull=True), name="guide_served_platform_uniq",
            ),
        ]
        indexes = [models.Index(fields=["conversation", "first_served_at"], name="guide_served_story_idx")]

    def __str__(self) -> str:
        return f"tool guide {self.version} for {self.platform}"


class ClientAction(models.Model):
    """What a person did to a conversation from the plugin's side panel: its audit, shown on the story.

    Staff act in the admin, whose log (``LogEntry``) records them by user; a
    plugin client has no user, so its pauses and resumes are recorded here,
    by client. The change itself goes through the same operator service.
    """

    class Action(models.TextChoices):
        PAUSE = "pause", "Paused"
        RESUME = "resume", "Resumed"

    # Kept when the client is deleted: the story still says a plugin did it.
    client = models.ForeignKey(
        PluginClient, on_delete=models.SET_NULL, null=True, blank=True, related_name="actions"
    )
    client_label = models.CharField(max_length=64, help_text="The client's id when it acted.")
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="client_actions"
    )
    action = models.CharField(max_length=16, choices=Action.choices)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["conversation", "at"], name="client_action_story_idx")]

    def __str__(self) -> str:
        return f"{self.get_action_display()} by plugin client {self.client_label}"


class AdapterReport(models.Model):
    """What a plugin's adapter noticed that suggests a chat site changed (SPEC §6 ``browser.adapter_report``).

    One row per client, platform, adapter version and kind, counted: the
    plugin sends a kind at most once a minute, and each report adds its count
    here and keeps its latest detail. A client has at most
    ``ingest.services.reports.MAX_REPORTS_PER_CLIENT`` rows; the one seen
    longest ago gives way to a new one.
    """

    class Kind(models.TextChoices):
        # A watched request's response did not parse.
        STREAM_UNRECOGNISED = "stream_unrecognised", "Stream unrecognised"
        # A stream said its answer stopped early (a length limit, an error mid-answer): nothing was sent.
        STREAM_INCOMPLETE = "stream_incomplete", "Stream stopped early"
        # An answer was read from the page because no stream of it was read.
        DOM_FALLBACK_USED = "dom_fallback_used", "DOM fallback used"
        # A selector list found nothing where it must.
        SELECTOR_MISSING = "selector_missing", "Selector missing"
        PAGE_VALUE_MISSING = "page_value_missing", "Page value missing"
        DELIVERY_BLOCKED = "delivery_blocked", "Delivery blocked"

    client = models.ForeignKey(PluginClient, on_delete=models.CASCADE, related_name="adapter_reports")
    platform = models.CharField(max_length=16)
    adapter = models.CharField(max_length=64, blank=True, help_text="The adapter's version, as the plugin said.")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    count = models.PositiveIntegerField(default=0)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    detail = models.JSONField(default=dict, blank=True, help_text="The latest report's detail: no chat content.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["client", "platform", "adapter", "kind"], name="adapter_report_uniq"
            ),
        ]
        indexes = [models.Index(fields=["platform", "kind", "last_at"], name="adapter_report_recent_idx")]

    def __str__(self) -> str:
        return f"{self.platform} {self.kind} ×{self.count}"


class ToolPolicy(models.Model):
    """Permission for a tool of a target, globally or for one plugin client and/or conversation.

    The most specific row wins (client and conversation, then conversation,
    then client, then global; at the same scope, a row naming the tool
    before one for its whole target); without a row, the tool's default.
    A blank ``tool`` covers every tool of ``target`` (an MCP server, SPEC §5.4).
    """

    target = models.CharField(
        max_length=64, default=DEFAULT_TARGET,
        help_text="conductor, or the name of an MCP server.",
    )
    tool = models.CharField(
        max_length=128, blank=True,
        help_text="A tool of the target, e.g. shell.run; blank: every tool of an MCP server.",
    )
    client = models.ForeignKey(
        PluginClient, on_delete=models.CASCADE, null=True, blank=True,
        related_name="tool_policies",
    )
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, null=True, blank=True,
        related_name="tool_policies",
    )
    policy = models.CharField(max_length=16, choices=Policy.CHOICES)
    allow_network = models.BooleanField(
        default=False,
        help_text="shell.run: the command may use the network (the internet and this machine's loopback, "
        "where the server, its database and Redis listen). Off: it runs in a network namespace of its own.",
    )
    note = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table it was created with, in the engine's app (moved here with its services).
        db_table = "automation_toolpolicy"
        verbose_name_plural = "tool policies"
        constraints = [
            models.UniqueConstraint(
                fields=["target", "tool"], condition=Q(client__isnull=True, conversation__isnull=True),
                name="tool_policy_global_uniq",
            ),
            models.UniqueConstraint(
                fields=["target", "tool", "client"], condition=Q(client__isnull=False, conversation__isnull=True),
                name="tool_policy_client_uniq",
            ),
            models.UniqueConstraint(
                fields=["target", "tool", "conversation"],
                condition=Q(client__isnull=True, conversation__isnull=False),
                name="tool_policy_conversation_uniq",
            ),
            models.UniqueConstraint(
                fields=["target", "tool", "client", "conversation"],
                condition=Q(client__isnull=False, conversation__isnull=False),
                name="tool_policy_client_conversation_uniq",
            ),
        ]

    @property
    def full_name(self) -> str:
        """``tool``, ``server::tool`` or ``server::*``."""
        if self.target == DEFAULT_TARGET:
            return self.tool
        return f"{self.target}::{self.tool or '*'}"

    def __str__(self) -> str:
        scope = " ".join(
            part for part in (
                f"client {self.client}" if self.client_id else "",
                f"conversation {self.conversation}" if self.conversation_id else "",
            ) if part
        ) or "everywhere"
        return f"{self.full_name}: {self.policy} ({scope})"

    def clean(self) -> None:
        if self.target == DEFAULT_TARGET:
            if self.tool not in tools:
                raise ValidationError({"tool": f"unknown tool {self.tool!r}"})
        elif not McpServer.objects.filter(name=self.target).exists():
            raise ValidationError({"target": f"unknown target {self.target!r}: no MCP server has this name"})
        if self.allow_network and not (self.target == DEFAULT_TARGET and tools.get(self.tool).network_by_policy):
            by_policy = ", ".join(spec.name for spec in tools if spec.network_by_policy)
            raise ValidationError({"allow_network": f"only {by_policy} runs without network unless allowed"})


def new_request_id() -> str:
    return uuid.uuid4().hex


class ToolPolicyVersion(models.Model):
    """One row whose ``token`` changes, in the same transaction, with every change of a
    ``ToolPolicy`` row (``ingest.signals``): a process that keeps the policies in memory
    reads the token with its other reads and reloads them when it differs (
    ``selectors.policies.tool_policies_current``). A new random token rather than a counter, so that a
    rolled-back change cannot bring back a token another process has already seen with other
    rows. Writes through ``QuerySet.update`` or ``bulk_create`` send no signal: they must call
    ``tool_policies_changed`` themselves.
    """

    token = models.UUIDField(default=uuid.uuid4)

    def __str__(self) -> str:
        return str(self.token)


class DeliveryRequest(models.Model):
    """A delivery frame sent to a plugin client, awaiting its result.

    ``method`` says which (SPEC §6.1): ``http`` a ``browser.proxy_delivery``,
    ``dom`` a ``browser.dom_delivery``; an answer counts only in the frame
    type of its request's method.

    Kept in the database, not in a server's memory: the answer may reach
    another ASGI process than the one that sent the request, and a killed
    server must not strand it.
    """

    request_id = models.CharField(primary_key=True, max_length=64, default=new_request_id)
    task = models.ForeignKey("automation.AutomationTask", on_delete=models.CASCADE, related_name="delivery_requests")
    client = models.ForeignKey(PluginClient, on_delete=models.CASCADE, related_name="+")
    method = models.CharField(max_length=16, default="http")
    # Set when the answer was read as delivered: the request that carried the text.
    delivered = models.BooleanField(default=False)
    sent_at = models.BigIntegerField()
    answered_at = models.BigIntegerField(null=True, blank=True)
    # The plugin's answer: {ok, status, body, error, error_code, evidence}; see
    # ingest.services.deliveries.delivery_result_record.
    result = models.JSONField(null=True, blank=True)

    class Meta:
        # The table it was created with, in the engine's app (moved here with its services).
        db_table = "automation_deliveryrequest"
        indexes = [
            # A plugin client's latest deliveries, for its admin page.
            models.Index(fields=["client", "sent_at"], name="delivery_request_client_idx"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.request_id} of task {self.task_id}"


class SiteDescription(models.Model):
    """An operator's description of a chat site (SPEC §9, "Platforms as data"), handed to every plugin.

    The descriptions shipped in ``plugin/sites/`` need no row: a row with a
    shipped site's name replaces that file's copy, one with a new name adds a
    site. Each save goes through ``ingest.sites.services.site_description_save``,
    which checks it against the schema and counts its ``revision``; the admin's
    log says who changed what.
    """

    name = models.CharField(
        max_length=16, unique=True, help_text="The site's platform name: lowercase letters, digits and _."
    )
    description = models.JSONField(help_text="The description, as plugin/sites/schema.json has it.")
    revision = models.PositiveIntegerField(default=1, help_text="Counts the saves of this description.")
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=150, help_text="Who saved this revision.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"site {self.name} (revision {self.revision})"
