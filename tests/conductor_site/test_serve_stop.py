"""How `serve` stops its children, with real processes."""

import subprocess
import sys
import time

from conductor_site.management.commands.serve import GRACE_SECONDS, Command

# A cluster as django-q2's: its main process, asked to stop, waits for its
# workers; a worker ignores SIGINT, except one running a scheduled dispatcher
# loop, which installs a handler of its own. Here the loop's task was taken
# from the queue as the cluster stopped: its handler comes after the first SIGINT.
WORKER = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):  # the cluster's stop began: the loop's task starts only now
    time.sleep(0.02)
heard = []
signal.signal(signal.SIGINT, lambda *_: heard.append(1))
while not heard:
    time.sleep(0.02)
"""
CLUSTER = """
import signal, subprocess, sys, time
stopping = []
signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
assert worker.stdout.readline() == "ready\\n"
print("ready", flush=True)
while not stopping:
    time.sleep(0.02)
open(sys.argv[2], "w").close()
sys.exit(worker.wait())
"""


def test_a_workers_loop_that_missed_the_first_sigint_stops_at_the_next_one_not_at_the_grace(tmp_path, capsys):
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER, WORKER, str(tmp_path / "stopping")],
                               stdout=subprocess.PIPE, start_new_session=True, text=True)
    assert cluster.stdout.readline() == "ready\n"
    started = time.monotonic()
    Command()._stop({"qcluster": cluster})
    elapsed = time.monotonic() - started
    assert cluster.returncode == 0, "stopped once its worker stopped, not killed"
    assert elapsed < GRACE_SECONDS / 2
    assert "did not stop" not in capsys.readouterr().err
