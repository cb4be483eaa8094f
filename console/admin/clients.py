"""Admin for plugin clients (superusers only) and instructions (SPEC §7).

A plugin client's token is shown once, on the page that answers the create or
rotate request, and never again: only its hash is stored, and it never goes
through the messages framework (whose storage is a cookie or the session).
"Pair a browser" does the same with a pairing code (``ingest/pairing.py``):
the token, the client id and this server's URL in one string, and its QR image.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Case, Q, When
from django.template.response import TemplateResponse
from django.utils import formats, timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from automation.models import AutomationTask
from console.helpers import (
    EVERYWHERE,
    SuperuserOnlyMixin,
    admin_change_url,
    admin_pages,
    admin_link,
    displayable_text,
    format_ms,
    json_block,
    log_change,
    text_block,
)
from console.lists import ListColumnsMixin
from conversations.models import DEFAULT_OWNER, MAX_OWNER_CHARS, validate_owner
from ingest.models import Instruction, PluginClient
from ingest.health import platform_health
from ingest.selectors.clients import (
    LastDelivery,
    plugin_client_activity,
    plugin_client_name_suggest,
    plugin_clients_connected,
)
from ingest.services.clients import (
    PluginClientRevoked,
    plugin_client_create,
    plugin_client_pair,
    plugin_client_revoke,
    plugin_client_rotate,
    plugin_clients_owner_set,
)
from ingest.tokens import MIN_TOKEN_LENGTH, WeakTokenError
from platforms import platforms

TOKEN_TEMPLATE = "admin/ingest/pluginclient/token.html"
PAIR_TEMPLATE = "admin/ingest/pluginclient/pair.html"
OWNER_TEMPLATE = "admin/ingest/pluginclient/owner.html"
# A plugin's error text can be as long as a frame; the client page shows its start.
ERROR_PREVIEW_CHARS = 300


def _text(value) -> str:
    """A value a plugin sent, as text that encodes (escaping is format_html's job)."""
    return displayable_text(str(value))


def _capture_cell(message) -> str:
    if message is None:
        return "-"
    return format_html(
        "{} · {} · {}",
        formats.localize(timezone.template_localtime(message.received_at)),
        message.get_capture_display() or "capture not said",
        admin_link(message, f"message {message.pk}"),
    )


def _delivery_cell(delivery: LastDelivery | None) -> str:
    if delivery is None:
        return "-"
    if delivery.answered_at is None:
        outcome = "awaiting the answer"
    elif delivery.ok is True:
        outcome = format_html("ok (HTTP {})", _text(delivery.status))
    else:
        outcome = format_html(
            "failed{}{}: {}",
            format_html(" [{}]", _text(delivery.error_code)) if delivery.error_code else "",
            format_html(" (HTTP {})", _text(delivery.status)) if delivery.status is not None else "",
            Truncator(_text(delivery.error or "no error given")).chars(ERROR_PREVIEW_CHARS),
        )
    return format_html(
        '{} · {} · sent {} · <a href="{}">task {}</a>',
        delivery.method, outcome, format_ms(delivery.sent_at),
        admin_change_url(AutomationTask, pk=delivery.task_id), _text(delivery.task_id),
    )


class OwnerField(forms.CharField):
    """Whose browser a client is; left empty, the default owner."""

    def __init__(self, **kwargs):
        super().__init__(
            max_length=MAX_OWNER_CHARS, required=False, initial=DEFAULT_OWNER, validators=[validate_owner],
            help_text=f"Whose browser this is (lowercase letters, digits, '_', '.', '-'; empty: {DEFAULT_OWNER}). "
            "A conversation moves only between clients of the same owner, and its results go only to them.",
            **kwargs,
        )

    def clean(self, value):
        return super().clean(value) or DEFAULT_OWNER


class PluginClientCreateForm(forms.Form):
    name = forms.CharField(
        max_length=200,
        help_text="A name for the plugin, e.g. 'laptop chrome'. Its client id is the name as a slug.",
    )
    owner = OwnerField()
    token = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
        help_text=f"Leave empty to generate one. At least {MIN_TOKEN_LENGTH} characters.",
    )


class PluginClientPairForm(forms.Form):
    name = forms.CharField(
        max_length=200,
        help_text="A name for this browser, e.g. 'laptop chrome'. Its client id is the name as a slug.",
    )
    owner = OwnerField()


class PluginClientOwnerForm(forms.Form):
    owner = OwnerField()


def server_url_of(request) -> str:
    """This server's URL as the browser reached it: what the plugin's options take."""
    return f"{'https' if request.is_secure() else 'http'}://{request.get_host()}"


def qr_svg(text: str) -> str:
    """``text`` as an inline SVG QR image (segno: pure Python, no image files)."""
    import segno  # imported here: only the pairing page draws one

    # Safe to mark: segno writes the SVG's markup and the text becomes its modules, not markup.
    return mark_safe(segno.make(text, error="m").svg_inline(scale=4, title="pairing code"))


@admin.register(PluginClient)
class PluginClientAdmin(SuperuserOnlyMixin, admin.ModelAdmin):
    list_display = [
        "client_id", "name", "owner", "enabled", "is_connected", "plugin_version", "last_seen_at", "created_at",
    ]
    list_filter = ["enabled", "owner"]
    search_fields = ["client_id", "name", "owner"]
    ordering = ["client_id"]
    fields = [
        "client_id", "name", "owner", "enabled", "is_connected", "last_seen_at", "created_at",
        "plugin_version", "capabilities_shown", "adapters_shown", "activity",
    ]
    readonly_fields = fields
    actions = ["revoke", "rotate", "set_owner"]

    # --- superusers only (the mixin); never saved from a form, never deleted -------------------

    def has_change_permission(self, request, obj=None):
        # Allows the actions; a client's row is never saved from a form, which
        # could write back a token hash that a rotation just replaced.
        return obj is None and self.has_view_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: a deleted client would take its links and policies along

    # --- the list ---------------------------------------------------------------------------

    def get_queryset(self, request):
        # Presence as the dispatcher sees it (a fresh `last_seen_at`), not the stored flag alone.
        return super().get_queryset(request).annotate(
            present=Case(
                When(Q(pk__in=plugin_clients_connected().values("pk")), then=True),
                default=False,
            )
        )

    @admin.display(description="connected", boolean=True, ordering="present")
    def is_connected(self, client):
        return client.present

    # --- what the plugin said in its latest hello, and what it did last ------------------------

    @admin.display(description="capabilities")
    def capabilities_shown(self, client):
        if not client.capabilities:
            return "-"
        return format_html_join(", ", "{}", ((_text(name),) for name in client.capabilities))

    @admin.display(description="adapters")
    def adapters_shown(self, client):
        if not client.adapters:
            return "-"
        return format_html_join(
            ", ", "{}: {}", ((_text(platform), _text(version)) for platform, version in client.adapters.items())
        )

    @admin.display(description="per platform")
    def activity(self, client):
        health_of = {health.platform: health for health in platform_health(client_pk=client.pk)}
        rows = format_html_join(
            "",
            "<tr><th>{}</th><td>{}</td><td>{}</td><td class=\"capture-health\" data-platform=\"{}\">{}</td></tr>",
            (
                (
                    platforms.get(row.platform).label, _capture_cell(row.last_capture),
                    _delivery_cell(row.last_delivery), row.platform, health_of[row.platform].summary(),
                )
                for row in plugin_client_activity(client_pk=client.pk)
            ),
        )
        return format_html(
            '<table class="plugin-activity"><thead><tr><th>platform</th><th>last capture</th>'
            "<th>last delivery</th><th>health</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    # --- pair a browser: the pairing code is shown once -------------------------------------

    def get_urls(self):
        # admin_view marks the answer never_cache (Cache-Control: no-store, ...).
        return [*admin_pages(self, [("pair/", self.pair_view, "pair")]), *super().get_urls()]

    def pair_view(self, request):
        """GET: the form (a name). POST: create the client and show its pairing code, once."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = PluginClientPairForm(request.POST or None, initial={"name": plugin_client_name_suggest()})
        code = client = None
        if request.method == "POST" and form.is_valid():
            try:
                client, code = plugin_client_pair(
                    name=form.cleaned_data["name"], owner=form.cleaned_data["owner"], server_url=server_url_of(request)
                )
            except ValidationError as exc:
                form.add_error(None, exc.messages)
            else:
                self.log_addition(request, client, "Paired a browser; its pairing code was shown once")
        context = {
            **self.admin_site.each_context(request),
            "title": "Pair a browser",
            "opts": self.opts,
            "form": form,
            "client": client,
            "code": code,
            "qr": qr_svg(code) if code else "",
            "media": self.media + form.media,
        }
        return TemplateResponse(request, PAIR_TEMPLATE, context)

    # --- create: the token is shown once -------------------------------------------------------

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = PluginClientCreateForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                client, token = plugin_client_create(
                    name=form.cleaned_data["name"], token=form.cleaned_data["token"] or None,
                    owner=form.cleaned_data["owner"],
                )
            except WeakTokenError as exc:
                form.add_error("token", str(exc))
            except ValidationError as exc:
                form.add_error(None, exc.messages)
            else:
                self.log_addition(request, client, "Created; its token was shown once")
                return self._tokens_page(request, [(client, token)], "created")
        context = {
            **self.admin_site.each_context(request),
            **(extra_context or {}),
            "title": "Add plugin client",
            "opts": self.opts,
            "form": form,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, "admin/ingest/pluginclient/add.html", context)

    def _tokens_page(self, request, issued: list[tuple[PluginClient, str]], verb: str):
        context = {
            **self.admin_site.each_context(request),
            "title": f"Plugin client token {verb}",
            "opts": self.opts,
            "issued": issued,
            "verb": verb,
        }
        return TemplateResponse(request, TOKEN_TEMPLATE, context)

    # --- actions ----------------------------------------------------------------------------

    @admin.action(permissions=["change"], description="Revoke selected clients (closes their sockets)",
                  location=EVERYWHERE)
    def revoke(self, request, queryset):
        selected = list(queryset)
        eligible = [client for client in selected if client.enabled]
        for client in eligible:
            plugin_client_revoke(client=client, actor=request.user.username)
        log_change(request, eligible, "Revoked; its open socket was closed")
        if eligible:
            self.message_user(
                request, f"Revoked {len(eligible)} client(s): {', '.join(c.client_id for c in eligible)}.",
                messages.SUCCESS,
            )
        if len(selected) > len(eligible):
            skipped = ", ".join(c.client_id for c in selected if not c.enabled)
            self.message_user(request, f"Skipped (already revoked): {skipped}.", messages.WARNING)

    @admin.action(permissions=["change"], description="Rotate the token of selected clients",
                  location=EVERYWHERE)
    def rotate(self, request, queryset):
        issued, skipped = [], []
        for client in queryset:
            try:
                issued.append((client, plugin_client_rotate(client=client, actor=request.user.username)))
            except PluginClientRevoked as exc:
                skipped.append(str(exc))
        log_change(request, [client for client, _ in issued], "Rotated its token; its open socket was closed")
        if skipped:
            self.message_user(request, "Skipped: " + "; ".join(skipped), messages.WARNING)
        if issued:
            return self._tokens_page(request, issued, "rotated")
        return None


    @admin.action(permissions=["change"], description="Set the owner of selected clients")
    def set_owner(self, request, queryset):
        """A page asking for the owner; its form posts back to this action with ``apply``."""
        selected = list(queryset.order_by("client_id"))
        form = PluginClientOwnerForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            changed = plugin_clients_owner_set(
                clients=selected, owner=form.cleaned_data["owner"], actor=request.user.username
            )
            log_change(request, changed, f"Owner set to {form.cleaned_data['owner']}")
            self.message_user(
                request,
                f"Owner of {len(changed)} client(s) set to {form.cleaned_data['owner']}"
                + (f": {', '.join(c.client_id for c in changed)}." if changed else "."),
                messages.SUCCESS,
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Set the owner of plugin clients",
            "opts": self.opts,
            "form": form,
            "clients": selected,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, OWNER_TEMPLATE, context)


@admin.register(Instruction)
class InstructionAdmin(ListColumnsMixin, admin.ModelAdmin):
    """Every baa block, valid or not; approve or reject held ones through their tasks."""

    list_display = ["__str__", "block_index", "call", "status", "message_link", "created_at"]
    list_filter = ["status", "tool"]
    search_fields = ["tool", "raw_text", "error"]
    ordering = ["-created_at", "-pk"]
    show_full_result_count = False
    fields = [
        "message_link", "block_index", "call", "status", "error", "raw_text_shown", "params_shown", "task_list",
    ]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        # The page names its message, not its message's text.
        return super().get_queryset(request).select_related("message__conversation").defer(
            "message__text", "message__raw_frame"
        )

    def get_list_queryset(self, queryset):
        return queryset.only(
            "block_index", "target", "tool", "status", "created_at", "message__role",
            "message__conversation__platform", "message__conversation__remote_id", "message__conversation__title",
        )

    @admin.display(description="tool")
    def call(self, instruction):
        if not instruction.tool:
            return "-"
        return instruction.label

    @admin.display(description="message", ordering="message__received_at")
    def message_link(self, instruction):
        return admin_link(instruction.message)

    @admin.display(description="block")
    def raw_text_shown(self, instruction):
        return text_block(instruction.raw_text)

    @admin.display(description="params")
    def params_shown(self, instruction):
        return json_block(instruction.params)

    @admin.display(description="tasks")
    def task_list(self, instruction):
        tasks = list(instruction.tasks.order_by("created_at", "pk"))
        if not tasks:
            return "-"
        return format_html_join(", ", "{} ({})", ((admin_link(task, task.task_id), task.status) for task in tasks))
