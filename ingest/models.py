from django.core.validators import RegexValidator
from django.db import models

from conversations.models import DEFAULT_OWNER, MAX_OWNER_CHARS, validate_owner
from tools.registry import DEFAULT_TARGET


def plugin_group_name(client_pk: int) -> str:
    """Channel-layer group of a client's socket. Built from the primary key:
    group names allow only letters, digits, '-', '_' and '.'."""
    return f"plugin-client.{client_pk}"


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
