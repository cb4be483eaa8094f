"""A PostgreSQL and a Redis server of a test's own, on ports and folders of their own.

A test that cuts, restarts or kills a server must never touch the machine's
shared ones. initdb refuses to run as root: as root, the PostgreSQL commands
run as the ``postgres`` user, in a folder it owns.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import redis

from tests.server import free_port


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


def missing_binaries() -> list[str]:
    """The server binaries this machine lacks (the tests that need them skip)."""
    missing = [name for name in ("initdb", "pg_ctl") if _pg_bin(name) is None]
    return missing + ([] if shutil.which("redis-server") else ["redis-server"])


class OwnPostgres:
    """A throwaway cluster: ``initdb`` into a temporary folder, listening on a free port."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="conductor-pg-"))
        self.port = free_port()
        self.data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, user="postgres")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, name: str, *args: str) -> None:
        argv = [_pg_bin(name), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(
            argv,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )

    def start(self) -> OwnPostgres:
        if not self.data.exists():
            self._run(
                "initdb",
                "--no-sync",
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
            )
        self._pg_ctl("start")
        return self

    def restart(self) -> None:
        """Stop at once, as a crash would (recovery runs at the start), and start again."""
        self._pg_ctl("restart", "-m", "immediate")

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "immediate")

    def _pg_ctl(self, action: str, *args: str) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        )
        self._run(
            "pg_ctl",
            action,
            "-w",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-o",
            options,
            *args,
        )

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=5)

    def terminate_in_transaction(self) -> int:
        """Cut every application connection that is inside a transaction now; return how many."""
        with self.connect() as connection:
            rows = connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' AND xact_start IS NOT NULL"
            ).fetchall()
        return sum(1 for (terminated,) in rows if terminated)

    def remove(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


class OwnRedis:
    """``redis-server`` on a free port, keeping nothing on disk: a restart loses everything."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="conductor-redis-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        with open(self.root / "log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.root),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=1).ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
