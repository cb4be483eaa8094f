"""A NUL or a lone surrogate anywhere in a request is a 400 and changes nothing, on both databases.

PostgreSQL answered a NUL in a list's filter, a search, an object id or a
reject reason with ``DataError`` (a 500) and left the task blocked.
"""

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.http import HttpResponse, QueryDict
from django.test import RequestFactory

from automation.models import AutomationTask, TaskStatus
from conductor_site.unstorable_text import UnstorableTextMiddleware
from tests.console.test_approval import TASKS, admin_client, shell, workspace  # noqa: F401 (fixtures)
from tests.console.test_story import story_url

pytestmark = pytest.mark.django_db


def every_changelist():
    return sorted(
        f"/admin/{model._meta.app_label}/{model._meta.model_name}/" for model in admin.site._registry
    )


@pytest.mark.parametrize(
    "query",
    ["status__exact=%00", "kind=%00", "q=%00", "o=%00", "status__exact=blocked&q=ls%00", "%00=1"],
)
def test_a_nul_in_the_task_lists_filters_and_search_is_a_400(admin_client, query):
    response = admin_client.get(f"{TASKS}?{query}")
    assert response.status_code == 400
    assert "NUL" in response.content.decode()


@pytest.mark.parametrize("changelist", every_changelist())
def test_a_nul_in_any_changelists_search_filter_or_object_id_is_a_400(admin_client, changelist):
    for url in (f"{changelist}?q=%00", f"{changelist}?p=%00&all=", f"{changelist}%00/change/"):
        assert admin_client.get(url).status_code == 400, url


def test_a_rejection_whose_reason_holds_a_nul_is_a_400_and_the_task_stays_blocked(admin_client, shell):
    response = admin_client.post(
        TASKS, {"action": "reject", ACTION_CHECKBOX_NAME: [shell.pk], "post": "yes", "reason": "no\x00"}
    )
    assert response.status_code == 400
    task = AutomationTask.objects.get(pk=shell.pk)
    assert (task.status, task.events.filter(action="reject").exists()) == (TaskStatus.BLOCKED, False)


def test_a_rejection_from_the_story_whose_reason_holds_a_nul_is_a_400_and_the_task_stays_blocked(
    admin_client, shell
):
    response = admin_client.post(
        f"{story_url(shell.conversation)}decide/",
        {"task_id": shell.pk, "decision": "reject", "reason": "too\x00broad"},
    )
    assert response.status_code == 400
    assert AutomationTask.objects.get(pk=shell.pk).status == TaskStatus.BLOCKED


@pytest.mark.django_db(databases="__all__")  # /healthz asks the channel layer's database too
def test_a_nul_in_a_login_a_cookie_or_a_header_is_a_400_before_anything_is_stored(client):
    assert client.post("/admin/login/", {"username": "root\x00", "password": "x"}).status_code == 400
    client.cookies["sessionid"] = "abcdefgh\x00"
    assert client.get("/admin/").status_code == 400
    del client.cookies["sessionid"]
    assert client.get("/healthz", headers={"User-Agent": "x\x00"}).status_code == 400
    assert client.get("/healthz").status_code == 200


def test_a_lone_surrogate_is_refused_as_a_nul_is():
    # A query string cannot carry one (it decodes with replacement), but a view's form may.
    request = RequestFactory().post("/admin/", {"reason": "ok"})
    request.POST = QueryDict(mutable=True)
    request.POST["reason"] = "bad \ud800"
    middleware = UnstorableTextMiddleware(lambda request: HttpResponse("reached"))
    assert middleware(request).status_code == 400
    assert middleware(RequestFactory().get("/admin/", {"q": "café ✓"})).content == b"reached"
