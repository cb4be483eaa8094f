import datetime as dt
from unittest import mock

import pytest
from django.db import OperationalError
from django.utils import timezone

from tests.factories import PluginClientFactory


@pytest.mark.django_db
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
