"""Run the ASGI server (daphne), this server's dispatcher loop and the django-q2 cluster in the foreground.

Each runs in its own process group, so the terminal's Ctrl-C reaches only this
supervisor, which then stops them all: SIGTERM to daphne and the dispatcher,
SIGINT to the cluster's group, a grace period, then SIGKILL for whatever is
left in their groups. django-q2 workers ignore SIGINT and the cluster waits
for running tasks, so SIGTERM is what they must honour.

Every server runs tasks: the dispatcher (``manage.py dispatch --loop``)
claims and runs them beside the other servers' loops. The children learn
this server's name (``CONDUCTOR_SERVER_NAME``, host:port unless set), so the
cluster's scheduled loop sees this one and returns. A dispatcher or a
cluster that dies is started again a second later, later still while it
keeps dying (its tasks go back by their own leases; a cluster exits while
Redis, its broker, is away); if daphne dies, everything is stopped and the
command fails.

Before it starts them, it says whether ``shell.run`` runs its commands
confined here, unconfined, or refuses them (``tools.checks.shell_sandbox_state``),
on its output and in the log (``shell_sandbox``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from automation.dispatcher import STOP_AFTER_CANCEL_SECONDS
from automation.loop import STOP_GRACE_SECONDS
from core.logfmt import log_event
from tools.checks import SandboxState, shell_sandbox_state

logger = logging.getLogger(__name__)

# Long enough for the dispatcher loop's own stop: its running tasks' grace,
# then their cancellation. An idle system stops in about two seconds.
GRACE_SECONDS = STOP_GRACE_SECONDS + STOP_AFTER_CANCEL_SECONDS + 3.0

# How each child is asked to stop (see the module docstring).
STOP = {
    "daphne": lambda process: process.terminate(),
    "dispatcher": lambda process: process.terminate(),
    "qcluster": lambda process: os.killpg(process.pid, signal.SIGINT),
}
# How long `serve` waits for daphne's port before saying it still waits.
LISTEN_WAIT_SECONDS = 60.0
# Children started again when they die, rather than stopping the server: the
# dispatcher, and the cluster, which exits when its broker (Redis) is away at
# its start or goes away under it; daphne serves on meanwhile. Each is started
# again after a delay that doubles while it keeps dying within a minute of
# its start, up to RESTART_DELAY_MAX_SECONDS.
RESTARTED = {"dispatcher", "qcluster"}
RESTART_DELAY_SECONDS = 1.0
RESTART_DELAY_MAX_SECONDS = 30.0
RESTART_STEADY_SECONDS = 60.0
# Children asked again, once a second, until they stop. A cluster stopping
# still hands the tasks already in its queue to its workers: a scheduled
# dispatcher loop that starts after the first SIGINT installs its handlers
# too late for it, and would keep the cluster waiting until the grace runs out.
# Its workers are asked again, not its main process, which is stopping them.
STOP_AGAIN = {
    "qcluster": lambda process: _signal_group_but_leader(process.pid, signal.SIGINT),
}
ASK_AGAIN_SECONDS = 1.0


def _signal_group_but_leader(group: int, signum: int) -> None:
    """Send ``signum`` to every process of process group ``group`` but its leader (Linux's /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == group:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group:
                os.kill(int(entry.name), signum)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile


def _kill_group(group: int) -> None:
    """SIGKILL whatever is left in process group ``group``."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Command(BaseCommand):
    help = "Start daphne, this server's dispatcher loop and the django-q2 cluster; Ctrl-C stops them."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument(
            "--no-cluster", action="store_true",
            help="Start only the ASGI server (a separate `qcluster` runs the tasks).",
        )

    def handle(self, *args, host, port, no_cluster, **options):
        self._stopping = False
        # The children's server name: the environment's, else this host and port.
        os.environ.setdefault("CONDUCTOR_SERVER_NAME", f"{socket.gethostname()}:{port}")
        starts = {"daphne": lambda: self._daphne(host, port)}
        if not no_cluster:
            starts["dispatcher"] = lambda: self._spawn([sys.executable, "manage.py", "dispatch", "--loop"])
            starts["qcluster"] = lambda: self._spawn([sys.executable, "manage.py", "qcluster"])
        self._say_sandbox()

        def request_stop(signum, frame):
            self._stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        children = {name: start() for name, start in starts.items()}
        if self._listening(host, port, daphne=children["daphne"]):
            self.stdout.write(f"Conductor on http://{host}:{port}/ (admin at /admin/); Ctrl-C stops it.")

        failed = self._supervise(children, starts)
        if failed:
            self.stderr.write(f"{failed} exited with code {children[failed].returncode}; stopping.")
        self._stop(children)
        if failed:
            sys.exit(1)

    def _supervise(self, children: dict[str, subprocess.Popen], starts: dict) -> str | None:
        """Watch the children until a stop is asked (None) or one not ``RESTARTED`` dies (its name).

        A restarted child's group is killed first: workers its main process
        left behind would hold the broker or run beside the new ones.
        """
        started_at = dict.fromkeys(children, time.monotonic())
        delays = dict.fromkeys(children, RESTART_DELAY_SECONDS)
        due: dict[str, float] = {}
        while not self._stopping:
            for name, child in children.items():
                if child.poll() is None:
                    continue
                if name not in RESTARTED:
                    return name
                if name not in due:
                    if time.monotonic() - started_at[name] >= RESTART_STEADY_SECONDS:
                        delays[name] = RESTART_DELAY_SECONDS
                    due[name] = time.monotonic() + delays[name]
                    self.stderr.write(
                        f"{name} exited with code {child.returncode}; starting it again in {delays[name]:.0f} s."
                    )
                    log_event(logger, "child_restart", level=logging.WARNING, child=name,
                              code=child.returncode, delay_s=delays[name])
                    delays[name] = min(delays[name] * 2, RESTART_DELAY_MAX_SECONDS)
                elif time.monotonic() >= due[name]:
                    del due[name]
                    _kill_group(child.pid)
                    children[name], started_at[name] = starts[name](), time.monotonic()
            time.sleep(0.1)
        return None

    def _listening(self, host: str, port: int, *, daphne: subprocess.Popen) -> bool:
        """Wait until the port accepts connections (the banner's link works when it is printed).

        False when daphne exited first (the loop below reports it) or Ctrl-C came.
        """
        address = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
        deadline = time.monotonic() + LISTEN_WAIT_SECONDS
        while daphne.poll() is None and not self._stopping:
            try:
                with socket.create_connection((address, port), timeout=0.5):
                    return True
            except OSError:
                if time.monotonic() > deadline:
                    self.stderr.write(f"daphne does not accept connections on {host}:{port} yet; still waiting.")
                    deadline = float("inf")
                time.sleep(0.1)
        return False

    def _say_sandbox(self) -> None:
        with tempfile.TemporaryDirectory(prefix="conductor-sandbox-") as workspace:
            state = shell_sandbox_state(
                workspace=Path(workspace), unconfined_allowed=settings.CONDUCTOR_SHELL_UNCONFINED
            )
        confined = state.state == SandboxState.CONFINED
        log_event(logger, "shell_sandbox", level=logging.INFO if confined else logging.WARNING,
                  state=state.state, missing=state.missing)
        self.stdout.write(f"shell.run: {state.sentence()}")

    def _daphne(self, host: str, port: int) -> subprocess.Popen:
        size = str(settings.CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES)
        return self._spawn(
            [
                # daphne, reading at most 64 KiB per frame until a plugin says hello.
                sys.executable, "-m", "conductor_site.daphne_server",
                "--bind", host, "--port", str(port),
                # Above the protocol's 1 MiB frame limit, so an oversized frame
                # reaches the consumer and gets `too_large` instead of a dropped socket.
                "--websocket-max-message-size", size,
                "--websocket-max-frame-size", size,
                "--application-close-timeout", "3",
                "conductor_site.asgi:application",
            ]
        )

    def _spawn(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=settings.BASE_DIR, start_new_session=True)

    def _stop(self, children: dict[str, subprocess.Popen]) -> None:
        # daphne and the dispatcher: SIGTERM (the dispatcher gives its
        # running tasks their grace). The cluster: SIGINT to its whole group,
        # as a terminal's Ctrl-C would. Its main process stops the workers in
        # order (about 2 s); the workers ignore SIGINT, except a scheduled
        # dispatcher loop, which stops within a tick instead of making the
        # cluster wait. The cluster's workers are asked again each second (``STOP_AGAIN``).
        for name, child in children.items():
            if child.poll() is None:
                STOP[name](child)
        deadline = time.monotonic() + GRACE_SECONDS
        asked_at = time.monotonic()
        while time.monotonic() < deadline and any(child.poll() is None for child in children.values()):
            if time.monotonic() - asked_at >= ASK_AGAIN_SECONDS:
                asked_at = time.monotonic()
                for name in STOP_AGAIN.keys() & children.keys():
                    if children[name].poll() is None:
                        STOP_AGAIN[name](children[name])
            time.sleep(0.1)
        for name, child in children.items():
            if child.poll() is None:
                self.stderr.write(f"{name} did not stop within {GRACE_SECONDS:.0f} s; killing it.")
            # Kill the whole group: daphne or cluster workers left behind would
            # keep the port or the broker busy.
            _kill_group(child.pid)
            child.wait()
        self.stdout.write("Stopped.")
