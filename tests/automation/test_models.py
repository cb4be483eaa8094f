import pytest
from django.db import IntegrityError, connection, transaction

from automation.models import AutomationTask, TaskStatus
from tests.factories import T0


def _constraints(table):
    with connection.cursor() as cursor:
        return connection.introspection.get_constraints(cursor, table)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "columns",
    [
        ["status", "execute_after"],
        ["kind", "status", "execute_after"],
        ["target_client_id", "target_platform", "status", "execute_after"],
    ],
)
def test_automation_tasks_has_the_spec_indexes(columns):
    indexes = [c["columns"] for c in _constraints("automation_tasks").values() if c["index"]]
    assert columns in indexes


@pytest.mark.django_db
def test_dedupe_key_is_unique_when_set():
    unique = [c["columns"] for c in _constraints("automation_tasks").values() if c["unique"]]
    assert ["dedupe_key"] in unique

    def row(dedupe_key):
        return AutomationTask(
            kind="k", status=TaskStatus.PENDING, dedupe_key=dedupe_key, execute_after=T0, sequence=1,
            max_attempts=3, created_at=T0, updated_at=T0,
        )

    row(None).save(force_insert=True)
    row(None).save(force_insert=True)  # many tasks have no dedupe key
    row("message:1").save(force_insert=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        row("message:1").save(force_insert=True)


@pytest.mark.django_db
def test_database_refuses_an_unknown_status_and_an_in_flight_task_without_owner():
    base = dict(kind="k", execute_after=T0, max_attempts=3, created_at=T0, updated_at=T0, sequence=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        AutomationTask(status="done", **base).save(force_insert=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        AutomationTask(status=TaskStatus.RUNNING, lease_owner=None, **base).save(force_insert=True)


def test_task_table_and_times_follow_the_spec():
    fields = {f.name: f for f in AutomationTask._meta.get_fields() if hasattr(f, "column")}
    assert AutomationTask._meta.db_table == "automation_tasks"
    assert fields["task_id"].primary_key
    for name in ("execute_after", "lease_until", "created_at", "updated_at", "started_at", "finished_at"):
        assert fields[name].get_internal_type() == "BigIntegerField", name
