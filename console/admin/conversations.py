"""Admin for conversations and messages (SPEC §7).

Pausing, resuming, renewal on and off, and "renew now" are actions that call
the services and record the operator in the admin log. Messages, their
instructions and the instructions' tasks are read-only here.
"""

from __future__ import annotations

from functools import partial

from django import forms
from django.contrib import admin, messages
from django.db.models import F, Prefetch
from django.db.models.functions import Substr
from django.forms.models import BaseInlineFormSet
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from automation.models import OPEN_STATUSES, AutomationTask
from automation.services.operator import conversations_pause
from console.helpers import (
    EVERYWHERE,
    admin_change_url,
    admin_link,
    displayable_text,
    json_block,
    link_or_text,
    log_change,
    text_block,
)
from console.admin.guide import ToolGuideAdminMixin, tool_guide_link
from console.admin.story import StoryAdminMixin, story_link
from console.lists import ListColumnsMixin, count_of
from conversations.models import Conversation, ConversationLink, Message
from conversations.services import (
    conversation_delivery_methods_set,
    conversation_handle_set,
    conversation_renewal_policy_set,
    conversations_renewal_set,
)
from ingest.models import Instruction
from ingest.sites import platform_adapter
from pipelines.delivery_methods import method_names_for
from pipelines.mail import MAIL_DELIVER
from pipelines.renewal import conversations_renew_now
from platforms.registry import UnsupportedPlatform

RECENT_MESSAGES = 20
RECENT_MAILS = 20


def mail_list(mails, *, party: str, none: str):
    """Mail tasks as lines: the task, its status, and the other party's handle (``party``: a payload key)."""
    if not mails:
        return none
    return format_html_join(
        "", '<div class="mail">{} {} {}</div>',
        ((admin_link(mail, mail.task_id), mail.status, "@" + str(mail.payload.get(party) or "(no handle)"))
         for mail in mails),
    )
# A runaway chat can put tens of thousands of blocks in one message; its page
# shows the first ones and links to the instruction list for the rest.
SHOWN_INSTRUCTIONS = 100
PREVIEW_CHARS = 120
RESULT_PREVIEW_CHARS = 2000


def _instruction_count():
    return count_of(Instruction.objects.all(), to="message")


def _text_head():
    """The first characters of a message's text: one more than a preview shows, so the
    preview knows whether it was cut. Lists fetch this instead of the whole text."""
    return Substr("text", 1, PREVIEW_CHARS + 1)


def _preview(message) -> str:
    return displayable_text(Truncator(message.text_head).chars(PREVIEW_CHARS))


class ReadOnlyInline(admin.TabularInline):
    """Rows shown with their parent, never edited here.

    Whoever may view the parent may view these rows: a conversation's links
    and messages, a message's instructions belong to it.
    """

    extra = 0
    can_delete = False

    def has_view_permission(self, request, obj=None):
        return self.admin_site.get_model_admin(self.parent_model).has_view_permission(request, obj)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# --- conversations -------------------------------------------------------------------------


class ConversationLinkInline(ReadOnlyInline):
    model = ConversationLink
    verbose_name_plural = "links (where the conversation was seen; the most recent one routes deliveries)"
    fields = ["client", "page", "organization_id", "last_assistant_message_id", "last_seen_at"]
    readonly_fields = fields
    ordering = ["-last_seen_at", "-pk"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("client")

    @admin.display(description="page")
    def page(self, link):
        # The plugin reports the URL; a hostile page can make it "javascript:...".
        return link_or_text(link.page_url) if link.page_url else "-"


class FirstRowsFormSet(BaseInlineFormSet):
    """Only the first ``limit`` rows of the inline's ordering."""

    limit: int

    def get_queryset(self):
        if not hasattr(self, "_first_rows"):
            self._first_rows = super().get_queryset()[: self.limit]
            len(self._first_rows)  # evaluate once; the formset indexes it per row
        return self._first_rows


class RecentFormSet(FirstRowsFormSet):
    limit = RECENT_MESSAGES


class FirstInstructionsFormSet(FirstRowsFormSet):
    limit = SHOWN_INSTRUCTIONS


class RecentMessageInline(ReadOnlyInline):
    model = Message
    formset = RecentFormSet
    verbose_name_plural = f"recent messages (the latest {RECENT_MESSAGES}, newest first)"
    fields = ["received_at", "role", "source", "preview", "instruction_count"]
    readonly_fields = fields
    ordering = ["-received_at", "-pk"]
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).defer("text", "raw_frame").annotate(
            text_head=_text_head(), n_instructions=_instruction_count()
        )

    @admin.display(description="text")
    def preview(self, message):
        return _preview(message)

    @admin.display(description="instructions")
    def instruction_count(self, message):
        return message.n_instructions


class ConversationForm(forms.ModelForm):
    class Meta:
        model = Conversation
        fields = ["handle", "renewal_idle_seconds", "renewal_text", "renewal_daily_cap", "delivery_methods"]


@admin.register(Conversation)
class ConversationAdmin(ToolGuideAdminMixin, StoryAdminMixin, ListColumnsMixin, admin.ModelAdmin):
    form = ConversationForm
    list_display = [
        "title", "handle", "platform", "remote_id", "owner", "paused", "renewal_enabled", "last_activity_at",
        "open_tasks", "story",
    ]
    list_display_links = ["title", "remote_id"]
    list_filter = ["platform", "owner", "paused", "renewal_enabled"]
    search_fields = ["remote_id", "title", "handle"]
    ordering = [F("last_activity_at").desc(nulls_last=True), "-pk"]
    show_full_result_count = False
    actions = ["pause", "resume", "enable_renewal", "disable_renewal", "renew_now"]
    inlines = [ConversationLinkInline, RecentMessageInline]
    fieldsets = [
        (None, {"fields": [
            "platform", "remote_id", "title", "owner", "paused", "last_activity_at", "created_at",
            "open_tasks", "related",
        ]}),
        ("Mail", {"fields": ["handle", "mail_received"]}),
        ("Renewal", {"fields": [
            "renewal_enabled", "renewal_idle_seconds", "renewal_text", "renewal_daily_cap",
        ]}),
        ("Delivery", {"fields": ["delivery_methods", "delivery_order"]}),
    ]
    readonly_fields = [
        "platform", "remote_id", "title", "owner", "paused", "last_activity_at", "created_at", "open_tasks",
        "related", "renewal_enabled", "delivery_order", "mail_received",
    ]

    def has_add_permission(self, request):
        return False  # conversations come from the plugin

    def has_delete_permission(self, request, obj=None):
        return False  # their tasks and history stay; `prune` removes old messages

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            n_open_tasks=count_of(AutomationTask.objects.filter(status__in=OPEN_STATUSES), to="conversation")
        )

    def get_list_queryset(self, queryset):
        # The columns, and the flags the actions read.
        # Two owners' chats may share a platform's id: the owner tells them apart.
        return queryset.only(
            "title", "handle", "platform", "remote_id", "owner", "paused", "renewal_enabled", "last_activity_at",
        )

    def save_model(self, request, obj, form, change):
        conversation_renewal_policy_set(
            conversation=obj,
            idle_seconds=form.cleaned_data["renewal_idle_seconds"],
            text=form.cleaned_data["renewal_text"],
            daily_cap=form.cleaned_data["renewal_daily_cap"],
            actor=request.user.username,
        )
        if "handle" in form.changed_data:
            conversation_handle_set(conversation=obj, handle=form.cleaned_data["handle"], actor=request.user.username)
        if "delivery_methods" in form.changed_data:
            conversation_delivery_methods_set(
                conversation=obj, methods=form.cleaned_data["delivery_methods"], actor=request.user.username
            )

    @admin.display(description="mail received (newest first)")
    def mail_received(self, conversation):
        mails = list(
            AutomationTask.objects.filter(kind=MAIL_DELIVER, conversation=conversation)
            .order_by("-created_at", "-pk")[:RECENT_MAILS]
        )
        return mail_list(mails, party="from_handle", none="none")

    @admin.display(description="delivered by, in order")
    def delivery_order(self, conversation):
        """The methods a delivery tries now: the conversation's own, else the platform's (SPEC §6.1)."""
        try:
            adapter = platform_adapter(conversation.platform)  # a site an operator added included
        except UnsupportedPlatform:
            return "-"
        names = method_names_for(adapter=adapter, conversation_methods=conversation.delivery_methods)
        source = "this conversation" if conversation.delivery_methods else "the platform's setting"
        return f"{' → '.join(names)} (from {source})"

    @admin.display(description="open tasks", ordering="n_open_tasks")
    def open_tasks(self, conversation):
        url = reverse("admin:automation_automationtask_changelist")
        return format_html(
            '<a href="{}?conversation__id__exact={}">{}</a>', url, conversation.pk, conversation.n_open_tasks
        )

    @admin.display(description="see also")
    def related(self, conversation):
        tasks = reverse("admin:automation_automationtask_changelist")
        messages_url = reverse("admin:conversations_message_changelist")
        return format_html(
            '{} (what it asked for, what ran, what came back, what it waits on) · '
            '<a href="{}?conversation__id__exact={}">all tasks</a> · '
            '<a href="{}?conversation__id__exact={}">all messages</a> · {}',
            story_link(conversation.pk, "its story"), tasks, conversation.pk, messages_url, conversation.pk,
            tool_guide_link(conversation.pk, "its tool guide"),
        )

    @admin.display(description="story")
    def story(self, conversation):
        return story_link(conversation.pk)

    # --- actions ---------------------------------------------------------------------------

    def _set_flag(self, request, queryset, *, field: str, value: bool, service, done: str, already: str):
        """Call ``service`` for the selected conversations whose ``field`` is not ``value`` yet."""
        selected = list(queryset)
        eligible = [conversation for conversation in selected if getattr(conversation, field) != value]
        if eligible:
            changed = service(conversation_ids=[c.pk for c in eligible], actor=request.user.username)
            log_change(request, eligible, done)
            self.message_user(request, f"{done}: {changed} conversation(s).", messages.SUCCESS)
        if len(selected) > len(eligible):
            self.message_user(
                request, f"Skipped {len(selected) - len(eligible)} conversation(s): {already}.", messages.WARNING
            )

    @admin.action(permissions=["change"], description="Pause selected conversations", location=EVERYWHERE)
    def pause(self, request, queryset):
        self._set_flag(request, queryset, field="paused", value=True, done="Paused", already="already paused",
                       service=partial(conversations_pause, is_paused=True))

    @admin.action(permissions=["change"], description="Resume selected conversations", location=EVERYWHERE)
    def resume(self, request, queryset):
        self._set_flag(request, queryset, field="paused", value=False, done="Resumed", already="not paused",
                       service=partial(conversations_pause, is_paused=False))

    @admin.action(permissions=["change"], description="Enable renewal", location=EVERYWHERE)
    def enable_renewal(self, request, queryset):
        self._set_flag(request, queryset, field="renewal_enabled", value=True, done="Enabled renewal",
                       already="renewal already on", service=partial(conversations_renewal_set, is_enabled=True))

    @admin.action(permissions=["change"], description="Disable renewal", location=EVERYWHERE)
    def disable_renewal(self, request, queryset):
        self._set_flag(request, queryset, field="renewal_enabled", value=False, done="Disabled renewal",
                       already="renewal already off", service=partial(conversations_renewal_set, is_enabled=False))

    @admin.action(permissions=["change"], description="Renew now (send the renewal text)", location=EVERYWHERE)
    def renew_now(self, request, queryset):
        conversations = queryset.in_bulk()
        report = conversations_renew_now(conversation_ids=sorted(conversations), actor=request.user.username)
        for pk, task_id in report.created:
            log_change(request, [conversations[pk]], f"Renew now: queued renewal task {task_id}")
        if report.created:
            self.message_user(
                request,
                format_html(
                    "Queued a renewal for {} conversation(s): {}",
                    len(report.created),
                    format_html_join(
                        ", ", '{} (<a href="{}">task {}</a>)',
                        ((conversations[pk], admin_change_url(AutomationTask, pk=task_id), task_id)
                         for pk, task_id in report.created),
                    ),
                ),
                messages.SUCCESS,
            )
        if report.skipped:
            self.message_user(
                request,
                f"Skipped {len(report.skipped)} conversation(s): "
                + "; ".join(f"{conversations.get(pk, pk)}: {why}" for pk, why in report.skipped),
                messages.WARNING,
            )


# --- messages ------------------------------------------------------------------------------


class InstructionInline(ReadOnlyInline):
    model = Instruction
    formset = FirstInstructionsFormSet
    verbose_name_plural = f"instructions (the message's baa blocks, the first {SHOWN_INSTRUCTIONS})"
    fields = ["block_index", "call", "params_shown", "status", "error", "task_list"]
    readonly_fields = fields
    ordering = ["block_index"]
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related(
            Prefetch("tasks", queryset=AutomationTask.objects.order_by("created_at", "pk"))
        )

    @admin.display(description="tool")
    def call(self, instruction):
        if not instruction.tool:
            return "-"
        return instruction.label

    @admin.display(description="params")
    def params_shown(self, instruction):
        return json_block(instruction.params, in_table=True)

    @admin.display(description="tasks and results")
    def task_list(self, instruction):
        tasks = list(instruction.tasks.all())
        if not tasks:
            return "-"
        return format_html_join(
            "",
            '<div class="instruction-task">{} {} {}</div>',
            (
                (admin_link(task, task.task_id), task.status,
                 text_block(Truncator(task.result_json or task.last_error or "").chars(RESULT_PREVIEW_CHARS),
                            in_table=True))
                for task in tasks
            ),
        )


@admin.register(Message)
class MessageAdmin(ListColumnsMixin, admin.ModelAdmin):
    list_display = [
        "preview", "role", "source", "capture", "conversation_link", "platform", "received_at", "instruction_count",
    ]
    list_filter = ["role", "source", "capture", "conversation__platform"]
    search_fields = ["text", "remote_message_id"]
    list_select_related = ["conversation"]
    ordering = ["-received_at", "-pk"]
    show_full_result_count = False
    inlines = [InstructionInline]
    fields = [
        "conversation_link", "role", "source", "capture", "remote_message_id", "parent_message_id", "client",
        "received_at", "all_instructions", "mail_sent", "text_shown", "raw_frame_shown",
    ]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # what was said stays as it was said

    def has_delete_permission(self, request, obj=None):
        return False  # `prune` removes old messages

    def get_queryset(self, request):
        # In the root queryset, so that the list can sort by it.
        return super().get_queryset(request).annotate(n_instructions=_instruction_count())

    def get_list_queryset(self, queryset):
        return queryset.only(
            "role", "source", "capture", "received_at", "conversation__platform", "conversation__remote_id",
            "conversation__title",
        ).annotate(text_head=_text_head())

    @admin.display(description="text")
    def preview(self, message):
        return _preview(message)

    @admin.display(description="conversation", ordering="conversation__title")
    def conversation_link(self, message):
        return format_html(
            "{} ({})", admin_link(message.conversation),
            story_link(message.conversation_id, "in its story", message=message.pk),
        )

    @admin.display(description="platform", ordering="conversation__platform")
    def platform(self, message):
        return message.conversation.get_platform_display()

    @admin.display(description="instructions", ordering="n_instructions")
    def instruction_count(self, message):
        return message.n_instructions

    @admin.display(description="instructions")
    def all_instructions(self, message):
        url = reverse("admin:ingest_instruction_changelist")
        return format_html(
            '{} (<a href="{}?message__id__exact={}">all in the instruction list</a>)',
            message.n_instructions, url, message.pk,
        )

    @admin.display(description="mail sent")
    def mail_sent(self, message):
        mails = list(AutomationTask.objects.filter(kind=MAIL_DELIVER, message=message).order_by("created_at", "pk"))
        return mail_list(mails, party="to", none="none")

    @admin.display(description="text")
    def text_shown(self, message):
        return text_block(message.text, css_class="message-text")

    @admin.display(description="raw frame")
    def raw_frame_shown(self, message):
        return json_block(message.raw_frame, sort_keys=True)
