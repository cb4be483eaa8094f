"""The Makefile's test targets: ``make test`` says how long it took, ``make test-fast`` stays a quick set."""

import re
import subprocess
import time

import pytest

from tests.server import ROOT

pytestmark = pytest.mark.database_free


def dry_run(target: str) -> str:
    """The commands ``make TARGET`` would run, without running them."""
    return subprocess.run(["make", "--no-print-directory", "-n", target], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_make_test_runs_the_node_tests_with_the_dot_reporter_and_reports_its_time():
    commands = dry_run("test")
    assert "--test --test-reporter=dot plugin/tests/*.test.js" in commands
    assert 'bin/took "make test"' in commands
    assert "10 to 20 minutes" in commands  # said before it starts


def test_make_test_fast_runs_a_set_of_existing_modules_that_start_no_server_or_browser():
    commands = dry_run("test-fast")
    assert "--test-reporter=dot" in commands and "lint-imports" in commands
    run = commands[commands.index("pytest"):]
    paths = re.findall(r"(?<!\S)tests/\S*", run[:run.index(";")])
    assert len(paths) >= 10
    for path in paths:
        assert (ROOT / path).exists(), path
        # These start real servers, processes or Chromium: make test runs them.
        assert not path.startswith(("tests/plugin", "tests/faults", "tests/bench")), path
        assert not path.endswith(("_processes.py", "_end_to_end.py", "_browser.py", "test_socket.py")), path


@pytest.mark.parametrize("status, outcome", [(0, "passed"), (3, "FAILED (exit 3)")])
def test_took_prints_the_outcome_and_the_time_and_keeps_the_status(status, outcome):
    start = int(time.time()) - 75
    done = subprocess.run([ROOT / "bin" / "took", "make test", str(start), str(status)], capture_output=True, text=True)
    assert done.returncode == status
    assert done.stdout in (f"make test: {outcome} in 1 min 15 s\n", f"make test: {outcome} in 1 min 16 s\n")


def test_make_doctor_runs_the_doctor_command():
    assert "python manage.py doctor" in dry_run("doctor")


def test_make_run_installs_only_what_the_app_needs_and_make_test_adds_the_test_tools():
    run = dry_run("run")
    assert "npm" not in run and "--no-default-groups" in run
    assert all("--no-default-groups" in line for line in run.splitlines() if "uv " in line or "/uv" in line)
    test = dry_run("test")
    assert "npm ci --prefix tests/mcp_servers" in test or (ROOT / "tests/mcp_servers/node_modules/.installed").exists()
    assert "npm ci --prefix tests/web_ext" in test or (ROOT / "tests/web_ext/node_modules/.installed").exists()
    assert re.search(r"uv sync --frozen\s*$", test, re.MULTILINE)
