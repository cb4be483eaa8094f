from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from conversations.handles import HANDLE_PATTERN, MAX_HANDLE_CHARS
from platforms import parse_delivery_methods, platform_choices


def validate_delivery_methods(value: str) -> None:
    try:
        parse_delivery_methods(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None



# Whose browsers and chat accounts a plugin client is (docs/security.md, "Whose conversation"):
# a conversation is its owner's. The key of a conversation is (owner, platform, remote id): the
# same chat id sent by clients of two owners is two conversations, and only the owner's clients
# route each.
DEFAULT_OWNER = "default"
MAX_OWNER_CHARS = 64

validate_owner = RegexValidator(
    r"\A[a-z0-9][a-z0-9_.-]*\Z",
    "An owner starts with a lowercase letter or digit and holds only lowercase letters, digits, '_', '.' and '-'.",
)

validate_handle = RegexValidator(
    rf"\A{HANDLE_PATTERN}\Z",
    "A handle starts with a lowercase letter and holds only lowercase letters, digits and hyphens.",
)


class Conversation(models.Model):
    """One owner's chat on one platform, identified by its owner and the platform's own id."""

    platform = models.CharField(
        max_length=16, choices=platform_choices, help_text="The chat web app: a registered platform adapter."
    )
    remote_id = models.CharField(
        max_length=255, help_text="The platform's conversation id, as the plugin reports it."
    )
    title = models.CharField(max_length=500, blank=True)
    # Ingest sets it: the owner of the client a new conversation arrives through, or "" when it
    # arrives through none (replayed without a client), which the first client to send it claims
    # unless that client's owner has a conversation with this id already.
    owner = models.CharField(
        max_length=MAX_OWNER_CHARS, blank=True, default=DEFAULT_OWNER, validators=[validate_owner],
        help_text="The owner of the plugin clients that send into it; only that owner's clients route it. "
        "Empty: not yet seen through a client.",
    )
    handle = models.CharField(
        max_length=MAX_HANDLE_CHARS, null=True, blank=True, unique=True, validators=[validate_handle],
        help_text="The name other conversations mail this one by (mail.send); empty: it receives no mail.",
    )
    paused = models.BooleanField(
        default=False,
        help_text="While paused, the conversation's tasks are not claimed; messages are still stored.",
    )
    renewal_enabled = models.BooleanField(default=False)
    renewal_idle_seconds = models.PositiveIntegerField(
        default=1800, help_text="Send the renewal text after this long without activity."
    )
    renewal_text = models.TextField(default="Please continue.", blank=True)
    renewal_daily_cap = models.PositiveIntegerField(
        default=12, help_text="At most this many renewals per day (UTC)."
    )
    delivery_methods = models.CharField(
        max_length=64, blank=True, validators=[validate_delivery_methods],
        help_text="The delivery methods to try, in order, e.g. \"dom\" or \"http,dom\"; "
        "empty: the platform's (CONDUCTOR_DELIVERY_METHODS).",
    )
    last_activity_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Each owner's chat with one id is its own conversation (docs/security.md, "Whose conversation").
            models.UniqueConstraint(
                fields=["owner", "platform", "remote_id"], name="conversation_owner_platform_remote_id_uniq"
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"{self.platform}:{self.remote_id}"


class ConversationLink(models.Model):
    """Where a conversation was seen: which plugin client, on which page.

    The most recently seen link is the conversation's route for deliveries.
    """

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="links")
    client = models.ForeignKey(
        "ingest.PluginClient", on_delete=models.CASCADE, related_name="conversation_links"
    )
    page_url = models.URLField(max_length=2000, blank=True)
    organization_id = models.CharField(max_length=255, blank=True)
    last_assistant_message_id = models.CharField(
        max_length=255, blank=True, help_text="The message a delivery replies under."
    )
    last_seen_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "client"], name="conversation_link_client_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["conversation", "-last_seen_at"], name="conversation_link_recent_idx")
        ]

    def __str__(self) -> str:
        return f"{self.conversation} via {self.client_id}"


class ConversationMove(models.Model):
    """The conversation's route went from one plugin client to another of the same owner (a re-target).

    Written by ingest when a message of the conversation arrives through a
    client other than the one its route named; shown on its story.
    """

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="moves")
    from_client = models.ForeignKey(
        "ingest.PluginClient", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    to_client = models.ForeignKey(
        "ingest.PluginClient", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["conversation", "at"], name="conversation_move_story_idx")]

    def __str__(self) -> str:
        return f"{self.conversation} moved from {self.from_client_id} to {self.to_client_id}"


class Message(models.Model):
    class Role(models.TextChoices):
        ASSISTANT = "assistant", "Assistant"
        USER = "user", "User"

    class Source(models.TextChoices):
        PLUGIN = "plugin", "Plugin"  # seen in the chat page and sent by the plugin
        REPLAY = "replay", "Replay"  # fed from a file by `manage.py replay`
        CONDUCTOR = "conductor", "Conductor"  # a text Conductor delivered into the chat

    class Capture(models.TextChoices):
        """How the plugin read the message (``capture`` of ``browser.final_message``)."""

        NETWORK = "network", "Network"  # from the chat app's own response stream
        DOM = "dom", "DOM"  # from the page

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    source = models.CharField(max_length=16, choices=Source.choices)
    capture = models.CharField(
        max_length=8, choices=Capture.choices, blank=True,
        help_text="How the plugin read the message; blank when it did not say.",
    )
    remote_message_id = models.CharField(max_length=255, blank=True)
    parent_message_id = models.CharField(max_length=255, blank=True)
    dedupe_key = models.CharField(
        max_length=300,
        null=True,
        blank=True,
        help_text="Identity of an ingested message within its conversation: its remote id, "
        "or a hash of its text when it has none. Null for texts Conductor sent.",
    )
    text = models.TextField()
    raw_frame = models.JSONField(null=True, blank=True)
    client = models.ForeignKey(
        "ingest.PluginClient",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="messages",
    )
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "dedupe_key"],
                condition=Q(dedupe_key__isnull=False),
                name="message_conversation_dedupe_uniq",
            ),
        ]
        indexes = [
            models.Index(fields=["conversation", "received_at"], name="message_conversation_time_idx"),
            # The admin's list order (newest first): read from the index, not sorted from 100 KiB rows.
            models.Index(fields=["received_at", "id"], name="message_received_idx"),
            # A plugin client's latest captures, for its admin page.
            models.Index(fields=["client", "received_at"], name="message_client_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.role} message {self.pk} in {self.conversation}"
