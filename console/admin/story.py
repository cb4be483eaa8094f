"""The conversation's story page; approving or rejecting its held blocks, and pausing or resuming it, from there.

All are views of ``ConversationAdmin`` (``StoryAdminMixin``), so they sit
under the conversation's admin URL and need a staff login. The story shows
tasks, their payloads and results, so it needs the permission to view tasks
as well as the conversation. A decision needs what the task list's approve
and reject actions need (the task admin's change permission) and goes
through the same operator services; it is also written to the admin log,
with the operator, on the task. Approving a tool that runs code needs
``automation.approve_code`` too (``operator.tasks_approve`` checks it).
Pausing and resuming ask first, on a page of their own, then run the
conversation list's own **Pause** or **Resume** action on this one
conversation: the same permission, service, admin log entry and message.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from automation.kinds import kinds
from automation.permissions import APPROVE_CODE_PERMISSION
from automation.models import AutomationTask
from automation.services import operator
from console.helpers import admin_pages, log_change
from console.story import Bound, conversation_story, story_bound
from conversations.models import Message

# What a decision posted from the story does: the operator service, and what it is called.
DECISIONS = {
    "approve": (operator.tasks_approve, "Approved"),
    "reject": (operator.tasks_reject, "Rejected"),
}
# ``is_paused`` as posted to the story's pause page: the ModelAdmin action it runs, and its verb.
PAUSE_CHOICES = {"1": ("pause", "Pause"), "0": ("resume", "Resume")}
# What the pause page answers: GET (and HEAD) asks, POST does it.
PAUSE_METHODS = ("GET", "HEAD", "POST")


def story_url(conversation_pk, **query) -> str:
    url = reverse("admin:conversations_conversation_story", args=[conversation_pk])
    query = {key: value for key, value in query.items() if value is not None}
    return f"{url}?{urlencode(query)}" if query else url


class StoryAdminMixin:
    """Mix into the conversation's ``ModelAdmin``: ``<pk>/story/``, ``<pk>/story/decide/`` and
    ``<pk>/story/pause/``; the ModelAdmin has the ``pause`` and ``resume`` actions."""

    def get_urls(self):
        return [
            *admin_pages(self, [
                ("<path:object_id>/story/", self.story_view, "story"),
                ("<path:object_id>/story/decide/", require_POST(self.story_decide_view), "story_decide"),
                ("<path:object_id>/story/pause/", self.story_pause_view, "story_pause"),
            ]),
            *super().get_urls(),
        ]

    def _task_admin(self):
        return self.admin_site.get_model_admin(AutomationTask)

    def _story_conversation(self, request, object_id):
        conversation = self.get_object(request, unquote(object_id))
        if conversation is None:
            raise Http404("no such conversation")
        if not (
            self.has_view_permission(request, conversation)
            and self._task_admin().has_view_permission(request)
        ):
            raise PermissionDenied
        return conversation

    def can_decide(self, request) -> bool:
        """What the task list's approve and reject actions need (``permissions=["change"]``)."""
        return self._task_admin().has_change_permission(request)

    def story_view(self, request, object_id):
        conversation = self._story_conversation(request, object_id)
        try:
            bound = self._bound(request, conversation)
        except ValueError:
            return HttpResponseBadRequest(
                "That is not a place in this story: open its latest page instead."
            )
        story = conversation_story(conversation=conversation, bound=bound)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Story of {conversation}",
            "subtitle": None,
            "opts": self.model._meta,
            "original": conversation,
            "story": story,
            "can_decide": self.can_decide(request),
            "can_approve_code": request.user.has_perm(APPROVE_CODE_PERMISSION),
            "can_pause": self.has_change_permission(request, conversation),
            "latest_url": story_url(conversation.pk),
            "earlier_url": story_url(conversation.pk, before=str(story.earlier))
            if story.earlier
            else None,
            "later_url": story_url(conversation.pk, after=str(story.later))
            if story.later
            else None,
            "page_url": request.get_full_path(),
        }
        return TemplateResponse(
            request, "admin/conversations/conversation/story.html", context
        )

    def _bound(self, request, conversation) -> Bound | None:
        """The page asked for: ``before`` or ``after`` a cursor, or starting at a ``message`` or ``task``."""
        message = task = None
        if pk := request.GET.get("message"):
            message = (
                Message.objects.filter(conversation=conversation, pk=int(pk))
                .only("received_at")
                .first()
            )
        if task_id := request.GET.get("task"):
            task = (
                AutomationTask.objects.filter(pk=task_id)
                .select_related("message")
                .only("kind", "created_at", "message__received_at")
                .first()
            )
        return story_bound(
            before=request.GET.get("before"),
            after=request.GET.get("after"),
            message=message,
            task=task,
        )

    def story_decide_view(self, request, object_id):
        """Approve or reject one held block of this conversation, as the task list's actions do."""
        conversation = self._story_conversation(request, object_id)
        if not self.can_decide(request):
            raise PermissionDenied
        decision = DECISIONS.get(request.POST.get("decision", ""))
        task = AutomationTask.objects.filter(
            pk=request.POST.get("task_id", ""),
            conversation=conversation,
            kind__in=kinds.named(lambda spec: spec.display.is_block),
        ).first()
        if decision is None or task is None:
            return HttpResponseBadRequest(
                "Choose approve or reject for a held block of this conversation."
            )
        service, verb = decision
        extra = {}
        if service is operator.tasks_reject:
            # Bounded by the service (REJECT_REASON_MAX_CHARS), as the form's maxlength says.
            extra["reason"] = request.POST.get("reason", "")
        if service is operator.tasks_approve:
            extra["has_perm"] = request.user.has_perm
        report = service(task_ids=[task.pk], actor=request.user.username, **extra)
        if report.done:
            log_change(request, [task], f"{verb} from the conversation's story")
            self.message_user(request, f"{verb} {_block_name(task)}.", messages.SUCCESS)
        elif task.pk in report.refused:
            self.message_user(request, f"Not approved: {report.refused[task.pk]}.", messages.ERROR)
        else:
            why = report.skipped.get(task.pk, "")
            self.message_user(request, f"Nothing done: {why}.", messages.WARNING)
        back = request.POST.get("next", "")
        if not back.startswith(story_url(conversation.pk)):
            back = story_url(conversation.pk)
        return HttpResponseRedirect(f"{back}#block-{task.instruction_id}")

    def story_pause_view(self, request, object_id):
        """GET: ask whether to pause (``is_paused=1``) or resume (``0``) the conversation; POST: do it.

        What runs is the list's own action on this one conversation, so the
        message, the admin log entry and a skip ("already paused") are the same.
        Asked without a valid ``is_paused`` (a bare link, a form that lost its
        field), the page asks for what applies now: pause a running
        conversation, resume a paused one; a POST so asked does nothing and
        says so (400). Other methods get a 405, in the admin's look too.
        """
        if request.method not in PAUSE_METHODS:
            return self._method_not_allowed(request, allowed=PAUSE_METHODS)
        conversation = self._story_conversation(request, object_id)
        if not self.has_change_permission(request, conversation):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        is_paused = data.get("is_paused", "")
        is_asked = is_paused in PAUSE_CHOICES
        if not is_asked:
            is_paused = "0" if conversation.paused else "1"
        action, verb = PAUSE_CHOICES[is_paused]
        if request.method == "POST" and is_asked:
            getattr(self, action)(request, self.get_queryset(request).filter(pk=conversation.pk))
            return HttpResponseRedirect(story_url(conversation.pk))
        context = {
            **self.admin_site.each_context(request),
            "title": f"{verb} {conversation}?",
            "subtitle": None,
            "opts": self.model._meta,
            "original": conversation,
            "verb": verb,
            "is_paused": is_paused,
            "story_url": story_url(conversation.pk),
            "is_nothing_done": request.method == "POST",
        }
        return TemplateResponse(
            request, "admin/conversations/conversation/story_pause.html", context,
            status=400 if request.method == "POST" else 200,
        )

    def _method_not_allowed(self, request, *, allowed: tuple[str, ...]) -> TemplateResponse:
        """A 405 that looks like the admin's other pages, naming the methods the page takes."""
        context = {
            **self.admin_site.each_context(request),
            "title": "Not a request this page takes",
            "subtitle": None,
            "method": request.method,
            "allowed": allowed,
        }
        response = TemplateResponse(request, "admin/conductor/method_not_allowed.html", context, status=405)
        response["Allow"] = ", ".join(allowed)
        return response


def _block_name(task: AutomationTask) -> str:
    instruction = task.instruction
    if instruction is None:
        return f"task {task.pk}"
    return f"block {instruction.block_index} ({instruction.label}) of message {instruction.message_id}"


def story_link(conversation_pk, text: str = "story", **query) -> str:
    """A link to the conversation's story (``query``: ``message`` or ``task`` to start there)."""
    return format_html(
        '<a href="{}" class="story-link">{}</a>',
        story_url(conversation_pk, **query),
        text,
    )
