"""Run the ASGI server (daphne) and the django-q2 cluster in the foreground.

Each runs in its own process group, so the terminal's Ctrl-C reaches only this
supervisor, which then stops both: SIGTERM to daphne, SIGINT to the cluster's
group, a grace period, then SIGKILL for whatever is left in their groups. django-q2 workers ignore SIGINT and
the cluster waits for running tasks, so SIGTERM is what they must honour.
If either child dies, the other is stopped and the command fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from automation.dispatcher import STOP_AFTER_CANCEL_SECONDS
from automation.loop import STOP_GRACE_SECONDS
from automation.schedules import dispatcher_loops_start

# Long enough for the dispatcher loop's own stop: its running tasks' grace,
# then their cancellation. An idle system stops in about two seconds.
GRACE_SECONDS = STOP_GRACE_SECONDS + STOP_AFTER_CANCEL_SECONDS + 3.0

# How each child is asked to stop (see the module docstring).
STOP = {
    "daphne": lambda process: process.terminate(),
    "qcluster": lambda process: os.killpg(process.pid, signal.SIGINT),
}


class Command(BaseCommand):
    help = "Start daphne and the django-q2 cluster; Ctrl-C stops both."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument(
            "--no-cluster", action="store_true", help="Start only the ASGI server."
        )

    def handle(self, *args, host, port, no_cluster, **options):
        self._stopping = False
        children = {"daphne": self._daphne(host, port)}
        if not no_cluster:
            children["qcluster"] = self._spawn([sys.executable, "manage.py", "qcluster"])
            # django-q2 first looks at its schedules half a minute after it
            # starts: queue the dispatcher loop and its standby now.
            dispatcher_loops_start()
        self.stdout.write(f"Conductor on http://{host}:{port}/ (admin at /admin/); Ctrl-C stops it.")

        def request_stop(signum, frame):
            self._stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)

        failed = None
        while not self._stopping and failed is None:
            for name, child in children.items():
                if child.poll() is not None:
                    failed = name
                    break
            time.sleep(0.1)

        if failed:
            self.stderr.write(f"{failed} exited with code {children[failed].returncode}; stopping.")
        self._stop(children)
        if failed:
            sys.exit(1)

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
        # daphne: SIGTERM. The cluster: SIGINT to its whole group, as a
        # terminal's Ctrl-C would. Its main process stops the workers in order
        # (about 2 s); the workers ignore SIGINT, except the dispatcher loop
        # and its standby, which stop within a tick instead of making the
        # cluster wait.
        for name, child in children.items():
            if child.poll() is None:
                STOP[name](child)
        deadline = time.monotonic() + GRACE_SECONDS
        for name, child in children.items():
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop within {GRACE_SECONDS:.0f} s; killing it.")
            # Kill the whole group: daphne or cluster workers left behind would
            # keep the port or the broker busy.
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait()
        self.stdout.write("Stopped.")
