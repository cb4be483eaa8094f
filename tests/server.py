"""Start Conductor as a user would (``make run`` or ``manage.py serve``) for a test.

The server gets its own data folder but points at the test databases, so the
test and the server see the same rows and the same embedded channel layer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests
from django.conf import settings
from django.db import connections

from tests.procs import database_url

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RunningServer:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/plugin/"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def interrupt(self, timeout: float = 30) -> float:
        """Send SIGINT to the whole process group, as Ctrl-C does; return seconds until exit."""
        started = time.monotonic()
        os.killpg(self.process.pid, signal.SIGINT)
        self.process.wait(timeout=timeout)
        return time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL every process of the server at once: its sockets die without a close."""
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def rss_bytes(self) -> int:
        """The resident memory of the server's processes together."""
        return sum(rss_bytes(pid) for pid in self.processes())

    def processes(self) -> list[int]:
        """The server's process and all its descendants still alive."""
        return [pid for pid in [self.process.pid, *descendants(self.process.pid)] if is_alive(pid)]


def is_alive(pid: int) -> bool:
    """Whether the process runs: neither gone nor a zombie (one exiting as it is read counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # gone (ENOENT), or exiting as it is read (ESRCH)
        return False
    return state != "Z"


def rss_bytes(pid: int) -> int:
    """The process's resident memory (VmRSS); 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            # A process exiting meanwhile: its /proc files are gone (ENOENT) or answer ESRCH.
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    env.update(
        CONDUCTOR_DATA_DIR=str(data_dir),
        # Servers sharing a django-q2 broker must share the key that signs its tasks.
        SECRET_KEY=settings.SECRET_KEY,
        DATABASE_URL=database_url("default"),
    )
    if "channels" in connections:
        env["CONDUCTOR_CHANNEL_LAYER_DB"] = str(connections["channels"].settings_dict["NAME"])
    env.update(extra)  # a server pointed at databases of its own, say
    return env


@contextlib.contextmanager
def running_server(
    data_dir: Path, *, command: str = "serve", ready_timeout: float = 90, port: int | None = None, **extra_env: str
) -> Iterator[RunningServer]:
    """Start the server, wait until /healthz answers, yield it, then stop it.

    ``command`` is "make" for ``make run``, "serve" for ``manage.py serve
    --no-cluster`` (the ASGI server alone, quicker to start) or "serve+cluster"
    for ``manage.py serve`` (daphne and the django-q2 cluster, as ``make run``
    starts them, without the install steps). ``port``: a port to listen on
    (a restarted server on its earlier port), else a free one.
    """
    port = port or free_port()
    env = server_env(data_dir, **extra_env)
    if command == "make":
        argv = ["make", "run", f"PORT={port}"]
    elif command == "serve+cluster":
        argv = [sys.executable, "manage.py", "serve", "--port", str(port)]
    else:
        argv = [sys.executable, "manage.py", "serve", "--no-cluster", "--port", str(port)]
    log_path = data_dir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = RunningServer(process=process, port=port, log_path=log_path)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{server.log()}")
            try:
                if requests.get(f"{server.base_url}/healthz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not answer /healthz:\n{server.log()}")
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            server.kill()


# One dispatcher loop queued now, as the cluster's schedule would queue it: django-q2 first
# looks at its schedules half a minute after it starts.
LOOP_START = (
    "from django_q.tasks import async_task; from automation.schedules import DISPATCH_FUNC, DISPATCH_Q_OPTIONS; "
    "async_task(DISPATCH_FUNC, task_name='conductor.dispatch.start', q_options=DISPATCH_Q_OPTIONS)"
)


@contextlib.contextmanager
def running_cluster(data_dir: Path, **extra_env: str) -> Iterator[RunningServer]:
    """Start the django-q2 cluster alone, as a server split in two runs it beside ``serve --no-cluster``; yield it, then kill it.

    Queues a dispatcher loop first (``manage.py shell``, so that it goes to
    the broker the cluster is given), as a cluster run on its own gets one
    from its schedule. Returns
    once the cluster runs; the caller waits for what it needs (a tick).
    ``port`` of the result means nothing.
    """
    env = server_env(data_dir, **extra_env)
    subprocess.run([sys.executable, "manage.py", "shell", "-c", LOOP_START], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    log_path = data_dir / "cluster.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    cluster = RunningServer(process=process, port=0, log_path=log_path)
    try:
        yield cluster
    finally:
        if process.poll() is None:
            cluster.kill()


def wait_for(predicate, what: str, timeout: float = 60, *, sleep=time.sleep):
    """Poll ``predicate`` until it returns something true, and return that; fail after ``timeout`` s.

    ``sleep`` waits between polls (a browser test passes one that keeps Playwright serving routes).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
