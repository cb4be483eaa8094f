"""The tool guide's pages (SPEC §5.5): a conversation's, and a new conversation's per platform.

Views of ``ConversationAdmin`` (``ToolGuideAdminMixin``), so they need a staff
login and the permission to view conversations. They show the text the chat's
assistant would be given, with a copy button, and what it was made of.

``mail.send`` is one story here: the text lists it only with handles to
write to, and this page says either which handles, or that there are none
yet, why the text leaves it out, and how an operator adds one.
"""

from __future__ import annotations

from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from console.helpers import admin_pages
from conversations.selectors import mail_owners
from ingest.guide import LEFT_OUT_NO_HANDLES, MAIL_FAMILY, MAX_GUIDE_BYTES
from ingest.selectors.guides import conversation_guide_client_pk, tool_guide
from platforms import platforms

TEMPLATE = "admin/conversations/conversation/tool_guide.html"


def tool_guide_link(conversation_pk, text: str = "tool guide") -> str:
    return format_html(
        '<a href="{}">{}</a>', reverse("admin:conversations_conversation_tool_guide", args=[conversation_pk]), text
    )


class ToolGuideAdminMixin:
    """Mix into the conversation's ``ModelAdmin``: ``tool-guide/?platform=P`` and ``<pk>/tool-guide/``."""

    def get_urls(self):
        return [
            *admin_pages(self, [
                ("tool-guide/", self.platform_guide_view, "platform_tool_guide"),
                ("<path:object_id>/tool-guide/", self.conversation_guide_view, "tool_guide"),
            ]),
            *super().get_urls(),
        ]

    def platform_guide_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        names = platforms.names()
        platform = request.GET.get("platform")
        if platform not in names:
            platform = names[0]
        guide = tool_guide(platform=platform)
        return self._render(request, guide=guide, platform=platform, platforms=names, conversation=None,
                            title=f"Tool guide for a new {platform} conversation")

    def conversation_guide_view(self, request, object_id):
        conversation = self.get_object(request, unquote(object_id))
        if conversation is None:
            raise Http404("no such conversation")
        if not self.has_view_permission(request, conversation):
            raise PermissionDenied
        guide = tool_guide(
            platform=conversation.platform, conversation=conversation,
            client_pk=conversation_guide_client_pk(conversation=conversation),
        )
        return self._render(request, guide=guide, platform=conversation.platform, platforms=None,
                            conversation=conversation, title=f"Tool guide for {conversation}")

    def _render(self, request, *, guide, platform, platforms, conversation, title):
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "subtitle": None,
            "opts": self.model._meta,
            "original": conversation,
            "guide": guide,
            "guide_max_kib": MAX_GUIDE_BYTES // 1024,
            "platform": platform,
            "platforms": platforms,
            "served": list(conversation.guides_served.order_by("-last_served_at")[:10]) if conversation else [],
            # Each callable tool, and why the text leaves it out ("" when it lists it).
            "tool_rows": [
                (tool, LEFT_OUT_NO_HANDLES if guide.facts.is_left_out(tool) else "") for tool in guide.facts.tools
            ],
            "mail_tool": next((tool for tool in guide.facts.tools if tool.spec.family == MAIL_FAMILY), None),
            "mail_owners": sorted(mail_owners(owner=guide.facts.owner)),
        }
        return TemplateResponse(request, TEMPLATE, context)
