"""Conductor started as a user starts it, tested over real sockets."""

import json
import time

import pytest
import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ingest.selectors.clients import plugin_client_is_connected
from ingest.services.clients import plugin_client_revoke
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

HELLO = {"type": "hello", "client_id": "laptop-chrome", "token": TEST_TOKEN, "plugin_version": "1.0.0"}


def say_hello(ws):
    ws.send(json.dumps(HELLO))
    reply = json.loads(ws.recv(timeout=10))
    assert reply["type"] == "hello.ok", reply


def test_make_run_serves_health_admin_and_the_socket_then_stops_on_ctrl_c(tmp_path):
    PluginClientFactory(client_id="laptop-chrome")
    with running_server(tmp_path, command="make") as server:
        health = requests.get(f"{server.base_url}/healthz", timeout=5)
        assert health.status_code == 200
        assert health.json()["database"] is True
        assert health.json()["connected_clients"] == 0
        # The dispatcher loop starts at once, not at django-q2's first schedule pass (30 s).
        def ticked():
            health = requests.get(f"{server.base_url}/healthz", timeout=5).json()
            return health if health["dispatcher_last_tick_age_seconds"] is not None else None

        assert wait_for(ticked, "the dispatcher's first tick", timeout=15)["dispatcher_last_tick_age_seconds"] < 10

        login = requests.get(f"{server.base_url}/admin/login/", timeout=5)
        assert login.status_code == 200 and 'name="password"' in login.text
        css = requests.get(f"{server.base_url}/static/admin/css/base.css", timeout=5)
        assert css.status_code == 200

        with connect(server.ws_url) as ws:
            say_hello(ws)
            ws.send(json.dumps({"type": "ping"}))
            assert json.loads(ws.recv(timeout=5)) == {"type": "pong"}
            assert requests.get(f"{server.base_url}/healthz", timeout=5).json()["connected_clients"] == 1

        processes = server.processes()
        assert len(processes) >= 3  # make's tree: serve, daphne, the cluster and its workers
        stop_seconds = server.interrupt()
        assert stop_seconds < 10, server.log()
        assert server.processes() == []
        assert "Stopped." in server.log()


def test_frame_over_one_mib_gets_too_large_over_a_real_socket(tmp_path):
    PluginClientFactory(client_id="laptop-chrome")
    with running_server(tmp_path) as server, connect(server.ws_url, max_size=None) as ws:
        say_hello(ws)
        ws.send(json.dumps({"type": "ping", "id": "big", "pad": ""}) + " " * (1024 * 1024))
        error = json.loads(ws.recv(timeout=10))
        assert (error["type"], error["code"]) == ("error", "too_large")
        ws.send(json.dumps({"type": "ping"}))
        assert json.loads(ws.recv(timeout=5)) == {"type": "pong"}


@pytest.mark.parametrize("origin", ["https://evil.example", "null"])
def test_web_page_origins_are_refused_at_the_handshake_with_403(tmp_path, origin):
    with running_server(tmp_path) as server:
        with pytest.raises(Exception) as excinfo:
            connect(server.ws_url, origin=origin).close()
        assert "403" in str(excinfo.value)
        with connect(server.ws_url, origin="chrome-extension://abcdefghijklmnop") as ws:
            ws.send(json.dumps({"type": "ping"}))
            assert json.loads(ws.recv(timeout=5))["code"] == "unauthorized"


def test_revoking_from_another_process_closes_the_socket_with_4403(tmp_path):
    client = PluginClientFactory(client_id="laptop-chrome")
    with running_server(tmp_path) as server, connect(server.ws_url) as ws:
        say_hello(ws)
        plugin_client_revoke(client=client, actor="alice")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 4403


def test_presence_expires_after_the_server_is_killed(tmp_path, settings):
    PluginClientFactory(client_id="laptop-chrome")
    interval = 0.5  # presence window: 2 × 0.5 s, in the server and in this process
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = interval
    with (
        running_server(tmp_path, CONDUCTOR_PING_INTERVAL_SECONDS=str(interval)) as server,
        connect(server.ws_url) as ws,
    ):
        say_hello(ws)
        time.sleep(4 * interval)  # longer than the window: the live socket keeps it fresh
        assert plugin_client_is_connected(client_id="laptop-chrome")

        server.kill()
        time.sleep(2 * interval + 0.5)
        assert not plugin_client_is_connected(client_id="laptop-chrome")
