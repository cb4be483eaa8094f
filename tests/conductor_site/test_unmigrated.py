"""A command on a database that was never migrated says so in one line."""

import os
import subprocess
import sys

import pytest
from django.db import OperationalError, ProgrammingError

from conductor_site.unmigrated import unmigrated_hint
from tests.server import ROOT

pytestmark = pytest.mark.database_free


def test_the_tool_guide_on_a_checkout_never_migrated_says_to_migrate_in_one_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run([sys.executable, "manage.py", "tool_guide"], cwd=ROOT, capture_output=True, text=True,
                          env={**env, "CONDUCTOR_DATA_DIR": str(data)}, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "manage.py tool_guide: the database has no tables yet (no such table: mcp_servers_mcptool). Run `make run` "
        "once, or `.venv/bin/python manage.py migrate_all`, then try again."
    ]


class UndefinedTable(Exception):
    sqlstate = "42P01"


def test_postgresqls_undefined_table_is_recognised_and_other_errors_are_not():
    error = ProgrammingError('relation "ingest_pluginclient" does not exist\nLINE 1: SELECT ...')
    error.__cause__ = UndefinedTable()
    assert unmigrated_hint(error, command="demo").startswith(
        'manage.py demo: the database has no tables yet (relation "ingest_pluginclient" does not exist).'
    )
    assert unmigrated_hint(OperationalError("database is locked"), command="demo") is None
