"""`serve` starts a dying cluster again, later each time, and stops only when daphne dies; with real processes."""

import subprocess
import sys
import threading
import time

from conductor_site.management.commands.serve import Command

# A cluster whose broker is away at its first two starts: it exits, as django-q2's does.
DIES_TWICE = """
import pathlib, sys, time
starts = pathlib.Path(sys.argv[1])
starts.write_text(starts.read_text() + "x" if starts.exists() else "x")
if len(starts.read_text()) <= 2:
    sys.exit(3)
time.sleep(120)
"""
SERVES = "import time; time.sleep(120)"


def spawn(*argv):
    return subprocess.Popen([sys.executable, "-c", *argv], start_new_session=True)


def supervised(starts):
    """Run ``Command._supervise`` in a thread; return the command, its children and what it returned (once stopped)."""
    command, outcome = Command(), {}
    command._stopping = False
    children = {name: start() for name, start in starts.items()}
    thread = threading.Thread(target=lambda: outcome.update(failed=command._supervise(children, starts)))
    thread.start()
    return command, children, outcome, thread


def wait_for(condition, timeout=15):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def test_a_cluster_that_exits_is_started_again_later_each_time_and_daphne_serves_on(tmp_path, capsys):
    starts_file = tmp_path / "starts"
    starts = {"daphne": lambda: spawn(SERVES), "qcluster": lambda: spawn(DIES_TWICE, str(starts_file))}
    command, children, outcome, thread = supervised(starts)
    daphne = children["daphne"]
    try:
        wait_for(lambda: starts_file.exists() and len(starts_file.read_text()) == 3 and children["qcluster"].poll() is None)
        command._stopping = True
        thread.join(5)
        assert outcome == {"failed": None}
        assert children["daphne"] is daphne and daphne.poll() is None  # never stopped for the cluster
    finally:
        for child in children.values():
            child.kill()
            child.wait()
    err = capsys.readouterr().err
    assert "qcluster exited with code 3; starting it again in 1 s." in err
    assert "qcluster exited with code 3; starting it again in 2 s." in err


def test_when_daphne_exits_the_server_stops():
    starts = {"daphne": lambda: spawn("import sys; sys.exit(2)"), "qcluster": lambda: spawn(SERVES)}
    _, children, outcome, thread = supervised(starts)
    try:
        thread.join(10)
        assert outcome == {"failed": "daphne"}
    finally:
        for child in children.values():
            child.kill()
            child.wait()
