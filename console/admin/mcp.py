"""The admin of MCP servers (SPEC §5.4): configure, list tools again, see why one fails.

Secrets are write-only: the form takes environment variables and headers as
text that is never filled back in; the page shows their names only.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from console.helpers import SuperuserOnlyMixin, readable_json
from ingest.guide import MAX_GUIDE_BYTES
from ingest.selectors.guides import tool_guide
from mcp_servers.models import RESERVED_TARGETS, McpServer, McpTool
from mcp_servers.services import mcp_server_refresh, mcp_server_secrets_set
from platforms import platforms


def _pairs(text: str, separator: str, what: str) -> dict[str, str]:
    pairs = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, found, value = line.partition(separator)
        if not found or not name.strip():
            raise forms.ValidationError(f"line {number}: expected {what}")
        pairs[name.strip()] = value.strip()
    return pairs


class McpServerForm(forms.ModelForm):
    env_text = forms.CharField(
        label="Environment variables", required=False, widget=forms.Textarea(attrs={"rows": 3}),
        help_text="NAME=value, one a line; replaces the stored ones. Blank keeps them. "
                  "Write ${NAME} to read NAME from Conductor's own environment. Never shown again.",
    )
    clear_env = forms.BooleanField(label="Remove the stored variables", required=False)
    headers_text = forms.CharField(
        label="HTTP headers", required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Name: value, one a line; replaces the stored ones. Blank keeps them. ${NAME} as above. "
                  "Never shown again.",
    )
    clear_headers = forms.BooleanField(label="Remove the stored headers", required=False)

    class Meta:
        model = McpServer
        fields = ["name", "transport", "command", "args", "cwd", "writable", "url", "enabled", "timeout_seconds"]

    def clean_name(self):
        name = self.cleaned_data["name"]
        if name in RESERVED_TARGETS:
            raise forms.ValidationError(f"{name!r} is Conductor's own target")
        return name

    def clean_args(self):
        args = self.cleaned_data["args"]
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise forms.ValidationError('a JSON list of strings, e.g. ["stdio"]')
        return args

    def clean_timeout_seconds(self):
        timeout = self.cleaned_data["timeout_seconds"]
        if timeout > settings.CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS:
            raise forms.ValidationError(
                f"at most {settings.CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS} s (CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS)"
            )
        return timeout

    def clean_env_text(self):
        return _pairs(self.cleaned_data["env_text"], "=", "NAME=value")

    def clean_headers_text(self):
        return _pairs(self.cleaned_data["headers_text"], ":", "Name: value")

    def clean(self):
        data = super().clean()
        transport = data.get("transport")
        if transport == McpServer.Transport.STDIO and not data.get("command"):
            self.add_error("command", "a stdio server needs a command")
        if transport == McpServer.Transport.HTTP and not data.get("url"):
            self.add_error("url", "a Streamable HTTP server needs a URL")
        return data

    def secrets(self) -> tuple[dict[str, str] | None, dict[str, str] | None]:
        """The variables and headers to store (None: keep what is stored)."""
        data = self.cleaned_data
        env = {} if data.get("clear_env") else (data.get("env_text") or None)
        headers = {} if data.get("clear_headers") else (data.get("headers_text") or None)
        return env, headers


class McpToolInline(admin.TabularInline):
    model = McpTool
    extra = 0
    can_delete = False
    fields = ["name", "description", "hints", "schema"]
    readonly_fields = fields
    ordering = ["position"]

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="annotations")
    def hints(self, tool):
        return ", ".join(f"{key}: {value}" for key, value in sorted(tool.annotations.items())) or "—"

    @admin.display(description="input schema")
    def schema(self, tool):
        return format_html("<pre>{}</pre>", readable_json(tool.input_schema))


@admin.register(McpServer)
class McpServerAdmin(SuperuserOnlyMixin, admin.ModelAdmin):
    form = McpServerForm
    inlines = [McpToolInline]
    list_display = ["name", "transport", "enabled", "tool_count", "tools_listed_at", "status", "source"]
    list_filter = ["enabled", "transport", "source"]
    search_fields = ["name"]
    actions = ["refresh_tools"]
    readonly_fields = ["stored_secrets", "tools_listed_at", "listing_error", "source", "in_the_guide"]
    fieldsets = [
        (None, {"fields": ["name", "transport", "enabled", "timeout_seconds", "listing_error", "tools_listed_at",
                           "source", "in_the_guide"]}),
        ("stdio", {"fields": ["command", "args", "cwd", "writable", "env_text", "clear_env"]}),
        ("Streamable HTTP", {"fields": ["url", "headers_text", "clear_headers"]}),
        ("Secrets", {"fields": ["stored_secrets"]}),
    ]

    @admin.display(description="tools")
    def tool_count(self, server):
        return server.tools.count()

    @admin.display(description="status")
    def status(self, server):
        if server.last_error and not server.tools_listed_at:
            return "failing"
        return "error" if server.last_error else "ok"

    @admin.display(description="why the last listing failed")
    def listing_error(self, server):
        return server.last_error or "—"

    @admin.display(description="in the tool guide")
    def in_the_guide(self, server):
        """Whether a new conversation's guide (the global policies) describes this server's tools or is cut."""
        if server.pk is None or not server.enabled:
            return "—"
        guide = tool_guide(platform=platforms.names()[0])
        prefix = f"{server.name}::"
        listed = [tool for tool in guide.facts.shown_tools if tool.header.startswith(prefix)]
        named_only = [tool for tool in guide.named_only if tool.header.startswith(prefix)]
        if not named_only:
            return f"every callable tool described ({len(listed)})"
        return (
            f"the guide is cut: {len(listed) - len(named_only)} of its {len(listed)} callable tools are described, "
            f"{len(named_only)} named only (a guide is kept within {MAX_GUIDE_BYTES // 1024} KiB)"
        )

    @admin.display(description="stored secrets (names only)")
    def stored_secrets(self, server):
        rows = [("variables", ", ".join(server.env_names) or "none"),
                ("headers", ", ".join(server.header_names) or "none")]
        return format_html_join("", "<div>{}: {}</div>", rows)

    def save_model(self, request, obj, form, change):
        env, headers = form.secrets()
        mcp_server_secrets_set(server=obj, env=env, headers=headers)
        super().save_model(request, obj, form, change)
        if obj.enabled:
            self._refresh(request, obj)

    @admin.action(description="List the selected servers' tools again (refresh)")
    def refresh_tools(self, request, queryset):
        for server in queryset:
            self._refresh(request, server)

    def _refresh(self, request, server):
        if mcp_server_refresh(server=server):
            self.message_user(request, f"{server.name}: {server.tools.count()} tools listed.", messages.SUCCESS)
        else:
            self.message_user(request, f"{server.name}: listing its tools failed: {server.last_error}",
                              messages.ERROR)
