"""A query compiled once per shape answers as the ORM does for every clock and ids, on the run's database."""

import datetime as dt

import pytest
from django.db.models import F

from core.clock import datetime_from_ms
from core.compiled import CompiledOnce, NotCompilable
from ingest.models import PluginClient
from tests.factories import PluginClientFactory

pytestmark = pytest.mark.django_db

NOW = 1_800_000_000_000  # ms


def seen_since(shape, now, ids):
    """Clients seen within ``shape`` seconds of ``now`` (a datetime derived from the clock), of ``ids`` when given."""
    clients = PluginClient.objects.filter(last_seen_at__gte=datetime_from_ms(now) - dt.timedelta(seconds=shape))
    if ids is not None:
        clients = clients.filter(client_id__in=ids)
    return clients.order_by("client_id").values_list("client_id", "enabled")


@pytest.fixture
def clients():
    for n, seconds_ago in enumerate([1, 5, 30, 300]):
        PluginClientFactory(client_id=f"c{n}", last_seen_at=datetime_from_ms(NOW) - dt.timedelta(seconds=seconds_ago))


def orm(shape, now, ids=None):
    return list(seen_since(shape, now, ids))


@pytest.mark.parametrize("window", [10, 60])
def test_rows_match_the_orm_for_every_clock_and_ids(clients, window):
    compiled = CompiledOnce(seen_since)
    for now in (NOW, NOW + 4_000, NOW + 29_500, NOW + 3_600_000, NOW - 60_000):
        assert compiled.rows(window, now=now) == orm(window, now)
        for ids in (["c0"], ["c1", "c2"], ["c3", "c0", "nobody"]):
            assert compiled.rows(window, now=now, ids=ids) == orm(window, now, ids)
    assert orm(window, NOW) != orm(window, NOW + 3_600_000)  # the clock does move the answer


def test_numbers_for_ids_go_where_the_query_compares_them(clients):
    def by_pk(shape, now, ids):
        return seen_since(shape, now, None).filter(pk__in=ids)

    compiled = CompiledOnce(by_pk, ids_are=int)
    pks = sorted(PluginClient.objects.values_list("pk", flat=True))
    for ids in ([pks[0]], [pks[1], pks[3]], [pks[3], pks[2], -1]):
        assert compiled.rows(60, now=NOW, ids=ids) == list(by_pk(60, NOW, ids))


def test_a_parameter_that_moves_with_the_clock_other_than_one_for_one_is_refused(clients):
    def twice_the_clock(shape, now, ids):
        return PluginClient.objects.filter(pk__lt=now * 2).values_list("client_id")

    with pytest.raises(NotCompilable, match="one for one"):
        CompiledOnce(twice_the_clock).rows(None, now=NOW)


def test_an_id_the_query_does_not_bind_is_refused(clients):
    def ids_written_into_an_expression(shape, now, ids):
        return PluginClient.objects.filter(client_id=F("client_id")).values_list("client_id")

    with pytest.raises(NotCompilable, match="every id"):
        CompiledOnce(ids_written_into_an_expression).rows(None, now=NOW, ids=["c0"])


def test_a_changed_setting_forgets_the_compiled_statements(clients, settings):
    built = []

    def counted(shape, now, ids):
        built.append(now)
        return seen_since(shape, now, ids)

    compiled = CompiledOnce(counted)
    compiled.rows(10, now=NOW)
    compiled.rows(10, now=NOW + 1)
    assert len(built) == 2  # one compile of two builds, then none
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = 7
    compiled.rows(10, now=NOW)
    assert len(built) == 4
