import datetime as dt
from unittest import mock

import pytest
from django.db import OperationalError
from django.utils import timezone

from tests.factories import PluginClientFactory


@pytest.mark.django_db(databases="__all__")
def test_healthz_reports_database_dispatcher_and_connected_clients(client, settings):
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = 20
    now = timezone.now()
    PluginClientFactory(connected=True, last_seen_at=now)
    PluginClientFactory(connected=True, last_seen_at=now - dt.timedelta(seconds=41))  # expired
    PluginClientFactory(connected=False, last_seen_at=now)
    PluginClientFactory(connected=True, last_seen_at=now, enabled=False)

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {
        "database": True,
        "channel_layer": True,
        "dispatcher_last_tick_age_seconds": None,
        "connected_clients": 1,
        "other_secret_key": None,
    }
    assert "no-store" in response["Cache-Control"]


@pytest.mark.django_db
def test_healthz_is_503_when_the_database_does_not_answer(client):
    with mock.patch(
        "conductor_site.health.connection.cursor", side_effect=OperationalError("connection refused")
    ):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["database"] is False
    assert response.json()["database_error"] == "connection refused"


def test_healthz_needs_no_login_and_only_answers_get(client):
    assert client.post("/healthz").status_code == 405


@pytest.mark.django_db(databases="__all__")
def test_healthz_is_503_naming_the_channel_layer_while_it_does_not_answer_and_200_once_it_does(client, settings):
    from core import layer_send

    if settings.REDIS_URL:  # Redis away: nothing listens on port 1
        real = settings.REDIS_URL
        settings.REDIS_URL = "redis://127.0.0.1:1/0"
        layer_send._redis.cache_clear()
        away = client.get("/healthz")
        settings.REDIS_URL = real
        layer_send._redis.cache_clear()
    else:  # the embedded layer's database locked by another process
        from django.db import connections

        with mock.patch.object(connections["channels"], "cursor", side_effect=OperationalError("database is locked")):
            away = client.get("/healthz")
    assert away.status_code == 503
    body = away.json()
    assert (body["database"], body["channel_layer"]) == (True, False)
    assert body["channel_layer_error"]
    back = client.get("/healthz")
    assert back.status_code == 200 and back.json()["channel_layer"] is True and "channel_layer_error" not in back.json()


@pytest.mark.django_db(databases="__all__")
def test_the_overview_says_when_the_channel_layer_does_not_answer(admin_client):
    assert 'id="channel-layer-away"' not in admin_client.get("/admin/overview/").content.decode()
    with mock.patch("console.views.channel_layer_error", return_value="ConnectionError: Connection refused"):
        page = admin_client.get("/admin/overview/").content.decode()
    assert 'id="channel-layer-away"' in page and "Connection refused" in page


@pytest.mark.django_db(databases="__all__")
def test_the_metrics_say_whether_the_server_reaches_each_part():
    from prometheus_client import generate_latest

    from conductor_site import metrics

    scrape = generate_latest(metrics.registry).decode()
    assert 'conductor_dependency_up{part="channel_layer"} 1.0' in scrape
    assert 'conductor_dependency_up{part="database"} 1.0' in scrape
    with mock.patch("conductor_site.metrics.channel_layer_error", return_value="ConnectionError: refused"):
        scrape = generate_latest(metrics.registry).decode()
    assert 'conductor_dependency_up{part="channel_layer"} 0.0' in scrape
