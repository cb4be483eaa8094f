"""A server of this installation signing with another SECRET_KEY is named, and logged once a minute (core/keys.py)."""

import asyncio
import logging
import socket
import sys
import time

import pytest
import requests
from django.conf import settings
from django.core.signing import BadSignature
from django.test import Client

from automation.models import DispatcherWorker
from automation.services.dispatcher_state import dispatcher_worker_heartbeat
from conductor_site.layer_messages import RefusedMessage, channel_layer_keys
from core.clock import now_ms
from core.keys import REFUSALS_RECENT_SECONDS, Refusals, channel_refusals, key_fingerprint
from core.logfmt import OneLineForeignTasks
from tests.conductor_site.test_layer_messages import GIVE_UP_SECONDS, layer_with
from tests.factories import make_staff
from tests.server import running_server, wait_for

OTHER_KEY = "a key of its own, as a second data folder makes"


def beat_as(server: str, *, secret_key: str, owner: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(settings, "SECRET_KEY", secret_key)
        now = now_ms()
        dispatcher_worker_heartbeat(owner=owner, server=server, now=now)


def test_a_fingerprint_tells_keys_apart_and_not_the_key():
    assert key_fingerprint("s3cret") == key_fingerprint("s3cret") != key_fingerprint("s3cret2")
    assert "s3cret" not in key_fingerprint("s3cret") and len(key_fingerprint("s3cret")) == 16


def test_refusals_count_the_last_two_minutes_only():
    clock = [1000.0]
    refusals = Refusals(clock=lambda: clock[0])
    for _ in range(500):  # a flood costs a counter per second
        refusals.record()
        clock[0] += 0.01
    assert refusals.recent() == 500
    clock[0] += REFUSALS_RECENT_SECONDS
    refusals.record(2)
    assert refusals.recent() == 2
    for _ in range(1000):  # refusals over a long while keep a counter per second of the window
        clock[0] += 1
        refusals.record()
    assert len(refusals._per_second) <= REFUSALS_RECENT_SECONDS + 1


@pytest.mark.django_db
def test_healthz_and_the_overview_name_a_server_whose_loop_signs_with_another_key(client):
    beat_as("here:8000", secret_key=settings.SECRET_KEY, owner="here:1:a")
    assert client.get("/healthz").json()["other_secret_key"] is None

    beat_as("there:8000", secret_key=OTHER_KEY, owner="there:2:b")
    report = client.get("/healthz").json()["other_secret_key"]
    assert report["servers"] == ["there:8000"]
    assert "another secret key runs tasks on this database (there:8000)" in report["message"]

    staff = Client()
    staff.force_login(make_staff("viewer", "automation.view_automationtask"))
    page = staff.get("/admin/overview/").content.decode()
    assert 'id="other-secret-key"' in page and "there:8000" in page

    # Gone (stalled, stopped): no longer named.
    DispatcherWorker.objects.filter(server="there:8000").update(heartbeat_at=1)
    assert client.get("/healthz").json()["other_secret_key"] is None


@pytest.mark.django_db
def test_a_key_this_server_accepts_as_a_fallback_is_not_another_key(client, settings):
    """Rotation: a server still on the old key, listed in SECRET_KEY_FALLBACKS here, is understood."""
    settings.SECRET_KEY_FALLBACKS = ["the old key"]
    beat_as("old:8000", secret_key="the old key", owner="old:1:a")
    assert client.get("/healthz").json()["other_secret_key"] is None


@pytest.mark.django_db
def test_a_row_that_told_no_fingerprint_names_no_one(client):
    now = now_ms()
    DispatcherWorker.objects.create(owner="old:1:a", server="old:8000", started_at=now, heartbeat_at=now)
    assert client.get("/healthz").json()["other_secret_key"] is None


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_channel_messages_sealed_with_another_key_are_counted_and_expired_ones_of_this_key_are_not(client):
    before = channel_refusals.recent()
    here = layer_with(channel_layer_keys(settings.SECRET_KEY))
    stranger = layer_with(channel_layer_keys(OTHER_KEY))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: 1_700_000_000.0)  # sealed here, long ago
        expired = here.serialize({"type": "sealed.long.ago"})
    with pytest.raises(RefusedMessage, match="expired"):
        here.deserialize(expired)
    assert channel_refusals.recent() == before

    async def exchange():
        me = await here.new_channel()
        await stranger.send(me, {"type": "sealed.elsewhere"})
        await here.send(me, {"type": "sealed.here"})
        return await asyncio.wait_for(here.receive(me), GIVE_UP_SECONDS)

    assert asyncio.run(exchange()) == {"type": "sealed.here"}
    assert channel_refusals.recent() - before == 1
    report = client.get("/healthz").json()["other_secret_key"]
    assert "process with another secret key writes to the channel layer" in report["message"]


def test_a_queued_task_signed_with_another_key_is_one_line_a_minute_not_a_traceback_each():
    record_filter = OneLineForeignTasks()
    records = []
    for _ in range(5):
        try:
            raise BadSignature('Signature "x" does not match')
        except BadSignature:
            record = logging.LogRecord("django-q", logging.ERROR, __file__, 1, "Failed to push task to queue",
                                       (), exc_info=sys.exc_info())
        if record_filter.filter(record):
            records.append(record)
    assert len(records) == 1
    assert records[0].getMessage().startswith("action=queue_task_refused tasks=1 ")
    assert records[0].exc_info is None
    other = logging.LogRecord("django-q", logging.INFO, __file__, 1, "Q Cluster starting.", (), None)
    assert record_filter.filter(other) and other.getMessage() == "Q Cluster starting."


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_second_server_with_a_key_of_its_own_is_named_by_the_first_and_logs_no_traceback(tmp_path):
    """Two real servers on one database and channel layer; the second started with another SECRET_KEY."""
    from django_q.tasks import async_task

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_server(tmp_path / "a", command="serve") as first, \
            running_server(tmp_path / "b", command="serve+cluster", SECRET_KEY=OTHER_KEY) as second:
        def named():
            report = requests.get(f"{first.base_url}/healthz", timeout=5).json()["other_secret_key"]
            return report if report and report["servers"] else None

        report = wait_for(named, "the second server named on the first's /healthz", timeout=60)
        assert report["servers"] == [f"{socket.gethostname()}:{second.port}"]
        # Tasks this installation's key signed reach the second server's cluster, which drops them:
        # one line, not a traceback each.
        for _ in range(3):
            async_task("math.floor", 1.5)
        wait_for(lambda: "action=queue_task_refused" in second.log(), "the refused tasks' line", timeout=60)
        time.sleep(3)
        log = second.log()
        assert log.count("action=queue_task_refused") == 1, log
        assert "Traceback" not in log, log
