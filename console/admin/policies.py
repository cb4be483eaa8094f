"""Admin for tool policies: who may run which tool of which target, where (SPEC §5.3, §5.4). Superusers only."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from console.helpers import SuperuserOnlyMixin
from ingest.models import ToolPolicy
from mcp_servers.models import McpServer
from tools.registry import DEFAULT_TARGET, tools


class ToolPolicyForm(forms.ModelForm):
    """A policy's target and tool chosen as one: ``tool``, ``server::tool``, or ``server::*`` for a whole server."""

    tool = forms.ChoiceField(choices=[])

    class Meta:
        model = ToolPolicy
        fields = ["tool", "policy", "allow_network", "client", "conversation", "note"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        choices = [(spec.name, f"{spec.name} (default: {spec.default_policy})") for spec in tools]
        for server in McpServer.objects.prefetch_related("tools"):
            choices.append((f"{server.name}::*", f"{server.name}::* (every tool of this MCP server)"))
            choices += [(f"{server.name}::{tool.name}", f"{server.name}::{tool.name} (default: approve)")
                        for tool in server.tools.all()]
        if self.instance.pk and self.instance.full_name not in dict(choices):
            choices.append((self.instance.full_name, self.instance.full_name))
        self.fields["tool"].choices = choices
        if self.instance.pk:
            self.initial["tool"] = self.instance.full_name

    def clean_tool(self):
        target, found, tool = self.cleaned_data["tool"].rpartition("::")
        self.instance.target = target if found else DEFAULT_TARGET
        return "" if tool == "*" else tool


@admin.register(ToolPolicy)
class ToolPolicyAdmin(SuperuserOnlyMixin, admin.ModelAdmin):
    form = ToolPolicyForm
    list_display = [
        "__str__", "target", "tool", "policy", "allow_network", "client", "conversation", "note", "updated_at",
    ]
    list_filter = ["policy", "target", "tool"]
    raw_id_fields = ["client", "conversation"]
