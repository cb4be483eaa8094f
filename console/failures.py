"""The admin's failures page: faults of the last 24 hours grouped by cause.

A group is one kind, one tool and one error once ids and numbers are
stripped (``automation.errors.error_signature``). Its "retry all" posts the
task list's retry action for every task the list matches with the group's
filter (``FailureGroupFilter``), so it goes through the bulk confirmation
page (counts first) like any other "all matching" action.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.auth.decorators import permission_required
from django.template.response import TemplateResponse

from automation.selectors import FAILURE_WINDOW_MS, HOUR_MS, failure_groups as groups_of_failures
from console.helpers import datetime_from_ms
from console.views import OVERVIEW_PERMISSION
from core.clock import now_ms


@permission_required(OVERVIEW_PERMISSION, raise_exception=True)
def failure_groups(request):
    """Failure groups, largest first, each with its counts, first and last seen, a sample and "retry all"."""
    now = now_ms()
    groups = groups_of_failures(now_ms=now)
    context = {
        **admin.site.each_context(request),
        "title": "Failures by cause",
        "hours": FAILURE_WINDOW_MS // HOUR_MS,
        "groups": [
            (group, datetime_from_ms(group.first_ms), datetime_from_ms(group.last_ms)) for group in groups
        ],
        "can_retry": request.user.has_perm("automation.change_automationtask"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/conductor/failure_groups.html", context)
