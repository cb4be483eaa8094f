"""deploy/nginx/conductor.conf, checked by nginx itself: ``nginx -t``, then in
front of a running server over TLS."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from urllib3.exceptions import InsecureRequestWarning
from websockets.sync.client import connect

from tests.deploy.tools import NGINX_SITE, require_tool, run
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.server import ROOT, RunningServer, free_port, server_env

CERT = "/etc/ssl/certs/conductor.example.org.pem"
KEY = "/etc/ssl/private/conductor.example.org.key"
PUBLIC_NAME = "conductor.example.org"
UPSTREAMS = ("server 10.0.0.11:8000 ", "server 10.0.0.12:8000 ")
STATIC_ROOT = "root /srv/conductor/data;"


@pytest.fixture
def nginx():
    return require_tool("nginx", package="nginx")


@pytest.fixture
def certificate(tmp_path) -> tuple[Path, Path]:
    """A self-signed certificate and key for the public name, made by openssl."""
    openssl = require_tool("openssl", package="openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    result = run([
        openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-subj", f"/CN={PUBLIC_NAME}", "-addext", f"subjectAltName=DNS:{PUBLIC_NAME},IP:127.0.0.1",
        "-keyout", str(key), "-out", str(cert),
    ])
    assert result.returncode == 0, result.stderr
    return cert, key


def site_text(certificate: tuple[Path, Path], **replacements: str) -> str:
    """The site with the test's certificate, and each of ``replacements`` (shipped text: test text) made."""
    text = NGINX_SITE.read_text()
    cert, key = certificate
    for old, new in {CERT: str(cert), KEY: str(key), **replacements}.items():
        assert old in text, f"the site no longer holds {old!r}"
        text = text.replace(old, new)
    return text


def main_config(tmp_path: Path, site: str, *, foreground: bool = False) -> Path:
    """A minimal nginx.conf that includes ``site`` in its http block, with every path in ``tmp_path``."""
    (tmp_path / "site.conf").write_text(site)
    lines = [
        f"pid {tmp_path}/nginx.pid;",
        f"error_log {tmp_path}/error.log;",
        "worker_processes 1;",
        "events { worker_connections 64; }",
        "http {",
        f"    access_log {tmp_path}/access.log;",
        *(f"    {kind}_temp_path {tmp_path}/{kind}_temp;" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")),
        f"    include {tmp_path}/site.conf;",
        "}",
    ]
    if foreground:
        lines.insert(0, "daemon off;")
        # Run as root, the workers would become nobody, who cannot read the
        # test's folder (mode 700); as another user, nginx ignores this line.
        if os.geteuid() == 0:
            lines.insert(0, "user root;")
    path = tmp_path / "nginx.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.database_free
def test_the_site_passes_nginx_t(nginx, certificate, tmp_path):
    config = main_config(tmp_path, site_text(certificate))
    result = run([nginx, "-t", "-c", str(config), "-p", str(tmp_path), "-e", str(tmp_path / "error.log")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test is successful" in result.stderr


@contextlib.contextmanager
def server_behind_proxy(data_dir: Path, timeout: float = 90) -> Iterator[RunningServer]:
    """``manage.py serve --no-cluster`` as behind the proxy: HTTPS_ONLY, the public name only.

    Ready when it answers /healthz to what the proxy sends (docs/operations.md's
    probe of one server); tests/server.py's ``running_server`` asks without
    those headers and would only ever get the HTTPS redirect.
    """
    port = free_port()
    env = server_env(data_dir, ALLOWED_HOSTS=PUBLIC_NAME, HTTPS_ONLY="true")
    log_path = data_dir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--no-cluster", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = RunningServer(process=process, port=port, log_path=log_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert process.poll() is None, f"server exited early:\n{server.log()}"
            with contextlib.suppress(requests.RequestException):
                probe = requests.get(f"{server.base_url}/healthz", timeout=1,
                                     headers={"Host": PUBLIC_NAME, "X-Forwarded-Proto": "https"})
                if probe.status_code == 200:
                    break
            assert time.monotonic() < deadline, f"server did not answer /healthz:\n{server.log()}"
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            server.kill()


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "nginx exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nginx did not listen on {port}")


@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.filterwarnings("ignore", category=InsecureRequestWarning)
def test_the_site_serves_a_running_server_over_tls_with_its_socket_and_static_files(nginx, certificate, tmp_path):
    PluginClientFactory(client_id="proxied-chrome")
    static = tmp_path / "proxy-static"
    (static / "static").mkdir(parents=True)
    (static / "static" / "probe.txt").write_text("from nginx\n")
    http_port, https_port = free_port(), free_port()
    (tmp_path / "server").mkdir()
    with server_behind_proxy(tmp_path / "server") as server:
        # Asked directly, without the proxy's headers: the HTTPS redirect.
        direct = requests.get(f"{server.base_url}/healthz", headers={"Host": PUBLIC_NAME},
                              allow_redirects=False, timeout=10)
        assert direct.status_code == 301
        upstream = f"server 127.0.0.1:{server.port} "
        site = site_text(
            certificate,
            **{
                "listen 80;": f"listen 127.0.0.1:{http_port};",
                "listen 443 ssl;": f"listen 127.0.0.1:{https_port} ssl;",
                UPSTREAMS[0]: upstream,
                UPSTREAMS[1]: upstream,
                STATIC_ROOT: f"root {static};",
            },
        )
        config = main_config(tmp_path, site, foreground=True)
        process = subprocess.Popen(
            [nginx, "-c", str(config), "-p", str(tmp_path), "-e", str(tmp_path / "error.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(https_port, process)
            https = f"https://127.0.0.1:{https_port}"

            plain = requests.get(
                f"http://127.0.0.1:{http_port}/healthz", headers={"Host": PUBLIC_NAME}, allow_redirects=False, timeout=10
            )
            assert plain.status_code == 301
            assert plain.headers["Location"] == f"https://{PUBLIC_NAME}/healthz"

            # HTTPS_ONLY redirects any request it does not see as HTTPS: a 200
            # means the server read X-Forwarded-Proto, and Host passed ALLOWED_HOSTS.
            health = requests.get(f"{https}/healthz", headers={"Host": PUBLIC_NAME}, verify=False, timeout=10)
            assert health.status_code == 200, health.text
            assert health.json()["database"] is True
            assert "max-age=31536000" in health.headers["Strict-Transport-Security"]

            probe = requests.get(f"{https}/static/probe.txt", headers={"Host": PUBLIC_NAME}, verify=False, timeout=10)
            assert probe.status_code == 200 and probe.text == "from nginx\n"
            assert probe.headers["Cache-Control"] == "max-age=3600"
            # A file the proxy host lacks goes to a server.
            missing = requests.get(f"{https}/static/not-collected.css", headers={"Host": PUBLIC_NAME}, verify=False,
                                   timeout=10)
            assert missing.status_code == 404

            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            # The public name in the URL (Host), the test's nginx at the other end of the socket.
            tcp = socket.create_connection(("127.0.0.1", https_port), timeout=10)
            with connect(f"wss://{PUBLIC_NAME}/ws/plugin/", sock=tcp, ssl=insecure, open_timeout=10) as ws:
                ws.send(json.dumps({"type": "hello", "client_id": "proxied-chrome", "token": TEST_TOKEN,
                                    "plugin_version": "1.0.0"}))
                assert json.loads(ws.recv(timeout=10))["type"] == "hello.ok"
                ws.send(json.dumps({"type": "ping"}))
                assert json.loads(ws.recv(timeout=10)) == {"type": "pong"}
                health = requests.get(f"{https}/healthz", headers={"Host": PUBLIC_NAME}, verify=False, timeout=10).json()
                assert health["connected_clients"] == 1
        finally:
            process.terminate()
            process.wait(timeout=10)
    assert "[emerg]" not in (tmp_path / "error.log").read_text()
