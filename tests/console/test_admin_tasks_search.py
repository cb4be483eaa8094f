"""The task list found by its arguments: search in the tool names and params, a filter by tool."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.services.tasks import task_create
from tests.factories import InstructionFactory
from tools.registry import Policy, ToolSpec, tools

pytestmark = pytest.mark.django_db

LIST = "/admin/automation/automationtask/"


def instruction_task(tool, params):
    instruction = InstructionFactory(tool=tool, params=params)
    task, _ = task_create(
        kind="test.instruction",
        actor="test",
        instruction_id=instruction.pk,
        payload={"instruction_id": instruction.pk, "target": "conductor", "tool": tool, "params": params},
    )
    return task


def shown(client, **query):
    page = client.get(LIST, query).content.decode()
    return page


@pytest.fixture
def tasks():
    return {
        "plan": instruction_task("files.write", {"path": "notes/plan.md", "content": "café au lait"}),
        "windows": instruction_task("files.read", {"path": "C:\\temp\\log.txt"}),
        "shell": instruction_task("shell.run", {"argv": ["ls", "-la"]}),
    }


@pytest.mark.parametrize(
    "term,expected",
    [
        ("plan.md", {"plan"}),
        ("CAFÉ", set()),  # letters outside ASCII match in their own case only
        ("café", {"plan"}),  # stored as "caf\u00e9" by json.dumps
        ("C:\\temp", {"windows"}),  # stored with its backslash doubled
        ("files.", {"plan", "windows"}),  # the tool's name
        ("shell.run -la", {"shell"}),  # every word must match somewhere
        ("%", set()),  # a LIKE wildcard is a plain character
    ],
)
def test_search_finds_tasks_by_tool_and_params_text(admin_client, tasks, term, expected):
    page = shown(admin_client, q=term)
    assert {name for name, task in tasks.items() if task.task_id in page} == expected


def test_the_search_is_one_like_per_term_on_the_payload_on_both_databases(admin_client, tasks):
    admin_client.get(LIST)
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(LIST, {"q": "plan.md"})
    searched = [q["sql"] for q in queries.captured_queries if "payload_json" in q["sql"]]
    assert searched and all("LIKE" in sql.upper() for sql in searched)
    # The list never reads the payload column itself, searched or not: its head only.
    assert all(not re.search(r'(?<!\()"automation_tasks"\."payload_json",', sql.split("FROM")[0]) for sql in searched)


def test_the_tool_filter_offers_the_registrys_tools_and_keeps_only_that_tools_tasks(admin_client, tasks):
    page = shown(admin_client)
    for spec in tools:
        assert f"?tool={spec.full_name.replace(':', '%3A')}" in page, spec.full_name
    page = shown(admin_client, tool="conductor::files.write")
    assert {name for name, task in tasks.items() if task.task_id in page} == {"plan"}


def test_a_tool_registered_later_is_a_choice_too(admin_client):
    tools.register(
        ToolSpec(
            name="test.search-only",
            description="",
            params_schema={"type": "object"},
            is_idempotent=True,
            default_policy=Policy.ALLOW,
        )
    )
    try:
        assert "?tool=conductor%3A%3Atest.search-only" in shown(admin_client)
    finally:
        tools.unregister(("conductor", "test.search-only"))


@pytest.mark.parametrize("value", ["nope", "conductor::nope", "::", "x" * 500])
def test_an_unknown_tool_filters_nothing_out(admin_client, tasks, value):
    response = admin_client.get(LIST, {"tool": value}, follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert all(task.task_id in page for task in tasks.values())
