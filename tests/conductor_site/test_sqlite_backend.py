"""The embedded database's backend: the threads of one process take turns to write."""

import threading

import pytest
from django.db import connection, transaction

from automation.models import DispatcherState, LeaseLoss
from conductor_site.db.sqlite3.base import _write_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded default's backend"),
]


def lock():
    return _write_lock(str(connection.settings_dict["NAME"]))


def test_a_transaction_holds_its_processs_write_lock_until_it_commits():
    with transaction.atomic():
        DispatcherState.objects.get_or_create(pk=1)
        assert lock().locked()
        with transaction.atomic():  # a savepoint takes nothing more
            DispatcherState.objects.filter(pk=1).update(paused_by="inner")
        assert lock().locked()
    assert not lock().locked()


def test_a_rolled_back_transaction_gives_the_lock_back():
    with pytest.raises(RuntimeError), transaction.atomic():
        DispatcherState.objects.get_or_create(pk=1)
        raise RuntimeError("the work failed")
    assert not lock().locked()
    assert not DispatcherState.objects.exists()


def test_threads_writing_at_once_take_turns_and_each_write_lands():
    writers, rounds, errors = 8, 25, []

    def write(n: int) -> None:
        try:
            for _ in range(rounds):
                with transaction.atomic():
                    row, _ = LeaseLoss.objects.get_or_create(kind="race", defaults={"count": 0})
                    LeaseLoss.objects.filter(kind="race").update(count=row.count + 1)
        except Exception as exc:  # noqa: BLE001 -- reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    # Each increment read and wrote inside one transaction: none was lost.
    assert LeaseLoss.objects.get(kind="race").count == writers * rounds
    assert not lock().locked()
