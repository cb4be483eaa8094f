"""`migrate_all` one at a time: two `make run` started at once on a fresh installation both get a migrated database.

Real processes, as `make run` starts them: `manage.py migrate_all` on a
fresh data folder (the embedded default) or a fresh PostgreSQL database.
"""

import fcntl
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connections

from conductor_site.migration_lock import ADVISORY_LOCK_KEY, LOCK_FILE_NAME
from tests.server import ROOT

TIMEOUT = 180


def command_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """A fresh installation's environment: nothing of the test run's databases, keys or layers."""
    dropped = ("DATABASE_URL", "REDIS_URL", "CONDUCTOR_CHANNEL_LAYER_DB", "CONDUCTOR_MCP_SERVERS", "SECRET_KEY")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST") and key not in dropped}
    return {**env, "CONDUCTOR_DATA_DIR": str(data_dir), **extra}


def start(command: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", command, *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def finished(process: subprocess.Popen) -> tuple[int, str]:
    output, _ = process.communicate(timeout=TIMEOUT)
    return process.returncode, output


def assert_fully_migrated(env: dict[str, str], *aliases: str) -> None:
    for alias in aliases:
        code, output = finished(start("migrate", env, "--check", "--database", alias))
        assert code == 0, output  # --check: non-zero while any migration is unapplied


def started_twice(envs: list[dict[str, str]]) -> list[tuple[int, str]]:
    processes = [start("migrate_all", env) for env in envs]
    try:
        return [finished(process) for process in processes]
    finally:
        for process in processes:
            process.kill()


@pytest.mark.database_free
def test_two_started_at_once_on_a_fresh_data_folder_both_succeed(tmp_path):
    env = command_env(tmp_path / "data")
    for code, output in started_twice([env, env]):
        assert code == 0, output
    assert_fully_migrated(env, "default", "channels")


@pytest.mark.database_free
def test_a_second_one_waits_for_the_lock_before_touching_a_database(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    env = command_env(data)
    with open(data / LOCK_FILE_NAME, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the first migrate_all holds it
        waiting = start("migrate_all", env)
        assert waiting.stdout.readline().startswith("Waiting for another migrate_all to finish")
        assert not (data / "conductor.sqlite3").exists() or not sqlite3.connect(data / "conductor.sqlite3").execute(
            "SELECT name FROM sqlite_master WHERE name = 'django_migrations'"
        ).fetchall()
    code, output = finished(waiting)
    assert code == 0, output
    assert_fully_migrated(env, "default", "channels")


@pytest.fixture
def fresh_postgres_database():
    """A new, empty PostgreSQL database on the test run's server; its URL."""
    config = connections["default"].settings_dict
    if connections["default"].vendor != "postgresql":
        pytest.skip("PostgreSQL only: the run's database is SQLite")
    server = {"host": config["HOST"] or "127.0.0.1", "port": config["PORT"] or 5432,
              "user": config["USER"], "password": config["PASSWORD"] or None}
    name = f"conductor_migrate_lock_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    auth = server["user"] + (f":{server['password']}" if server["password"] else "")
    try:
        yield f"postgres://{auth}@{server['host']}:{server['port']}/{name}", server | {"dbname": name}
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_two_hosts_started_at_once_on_one_fresh_postgres_database_both_succeed(tmp_path, fresh_postgres_database):
    """Two data folders, as on two hosts: only PostgreSQL's advisory lock is shared."""
    url, _ = fresh_postgres_database
    envs = [command_env(tmp_path / host, DATABASE_URL=url) for host in ("host-a", "host-b")]
    for code, output in started_twice(envs):
        assert code == 0, output
    assert_fully_migrated(envs[0], "default", "channels")


def test_on_postgres_a_second_one_waits_for_the_advisory_lock(tmp_path, fresh_postgres_database):
    url, database = fresh_postgres_database
    env = command_env(tmp_path / "data", DATABASE_URL=url)
    with psycopg.connect(autocommit=True, **database) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_LOCK_KEY])  # as the first migrate_all holds it
        waiting = start("migrate_all", env)
        assert waiting.stdout.readline().startswith("Waiting for another migrate_all to finish")
        assert holder.execute("SELECT to_regclass('django_migrations')").fetchone() == (None,)
    code, output = finished(waiting)
    assert code == 0, output
    assert_fully_migrated(env, "default")
