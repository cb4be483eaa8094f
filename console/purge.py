"""Purge from the console: the ``prune`` command's rules, counts first, then a confirmed delete.

Superusers only. GET shows how many finished tasks (with their events) and
messages are past the retention (``CONDUCTOR_RETENTION_DAYS``, or the days
asked for); POST with ``confirm=yes`` deletes them through the same service
as the command, logged with the operator as actor.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from automation.services.prune import prune


def _days(value: str | None) -> int:
    try:
        return max(1, int(value)) if value else settings.CONDUCTOR_RETENTION_DAYS
    except ValueError:
        return settings.CONDUCTOR_RETENTION_DAYS


def purge(request):
    """Counts of what ``prune`` would delete; deletes them once confirmed."""
    if not request.user.is_superuser:
        raise PermissionDenied
    days = _days(request.POST.get("days") if request.method == "POST" else request.GET.get("days"))
    if request.method == "POST" and request.POST.get("confirm") == "yes":
        report = prune(older_than_days=days, actor=request.user.username)
        messages.success(request, f"Purged what was older than {days} days: {report}.")
        return redirect("admin-overview")
    context = {
        **admin.site.each_context(request),
        "title": "Purge old tasks and messages?",
        "days": days,
        "report": prune(older_than_days=days, dry_run=True),
    }
    return TemplateResponse(request, "admin/conductor/purge.html", context)
