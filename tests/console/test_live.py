"""The pages that refresh by themselves answer the script's fetch, and what one refresh costs the server."""

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.staticfiles import finders
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.models import TaskStatus
from tests.factories import ConversationFactory, make_task

pytestmark = pytest.mark.django_db

LIST = "/admin/automation/automationtask/"
OVERVIEW = "/admin/overview/"
LIVE = {"headers": {"X-Conductor-Live": "1"}}


def regions(page):
    return re.findall(r'<div id="([\w-]+)"[^>]*\bdata-live\b', page)


@pytest.mark.parametrize("url,expected", [(LIST, ["task-results", "task-pagination"]), (OVERVIEW, ["content-main"])])
def test_the_live_fetch_gets_the_page_with_its_regions_and_the_script(admin_client, url, expected):
    task = make_task(TaskStatus.FAILED)
    response = admin_client.get(url, **LIVE)
    page = response.content.decode()
    assert response.status_code == 200
    assert regions(page) == expected
    assert 'src="/static/console/live.js" defer' in page
    if url == LIST:
        assert task.task_id in page


def test_the_live_fetch_keeps_the_filters_and_search_of_the_url(admin_client):
    failed, pending = make_task(TaskStatus.FAILED), make_task(TaskStatus.PENDING)
    page = admin_client.get(LIST, {"status__exact": "failed"}, **LIVE).content.decode()
    assert failed.task_id in page and pending.task_id not in page


def test_a_live_fetch_without_a_session_is_sent_to_the_login(client):
    response = client.get(LIST, **LIVE)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_script_is_a_static_file_of_the_console():
    assert finders.find("console/live.js")


def queries_per_refresh(client, url):
    client.get(url, **LIVE)  # warm: session, content types
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, **LIVE).status_code == 200
    return len(queries.captured_queries)


def test_a_refresh_costs_a_fixed_number_of_queries_however_many_tasks(admin_client):
    make_task(TaskStatus.FAILED, conversation_id=ConversationFactory().pk)
    few = {url: queries_per_refresh(admin_client, url) for url in (OVERVIEW, LIST)}
    for status in [TaskStatus.FAILED, TaskStatus.BLOCKED, TaskStatus.PENDING] * 4:
        make_task(status, conversation_id=ConversationFactory().pk)
    many = {url: queries_per_refresh(admin_client, url) for url in (OVERVIEW, LIST)}
    print(f"queries per refresh: {many}")
    assert many == few
    # The overview: its counts, chart, clients, capture warnings, paused kinds and servers with another key.
    assert many[OVERVIEW] <= 15 and many[LIST] <= 10


def test_a_live_fetch_leaves_the_waiting_messages_for_the_next_page_view(admin_client):
    failed = make_task(TaskStatus.FAILED)
    # An action's report, waiting for the redirect that another tab has not followed yet.
    admin_client.post(LIST, {"action": "retry", ACTION_CHECKBOX_NAME: [failed.pk], "post": "yes"})
    assert admin_client.get(LIST, **LIVE).status_code == 200
    shown = [str(m) for m in admin_client.get(LIST).context["messages"]]
    assert shown == [f"Retried 1 task(s): {failed.task_id}"]
