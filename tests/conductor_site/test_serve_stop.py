"""How `serve` stops its children, with real processes."""

import subprocess
import sys
import time

from conductor_site.management.commands.serve import GRACE_SECONDS, Command

# A cluster whose scheduled dispatcher loop took its task from the queue as
# the cluster stopped: the first SIGINT reaches it before its handlers do.
DEAF_TO_THE_FIRST_SIGINT = """
import signal, sys, time
heard = []
signal.signal(signal.SIGINT, lambda *_: heard.append(1))
print("ready", flush=True)
while len(heard) < 2:
    time.sleep(0.05)
"""


def test_a_cluster_that_missed_the_first_sigint_stops_at_the_next_one_not_at_the_grace(capsys):
    child = subprocess.Popen([sys.executable, "-c", DEAF_TO_THE_FIRST_SIGINT], stdout=subprocess.PIPE,
                             start_new_session=True, text=True)
    assert child.stdout.readline() == "ready\n"
    started = time.monotonic()
    Command()._stop({"qcluster": child})
    elapsed = time.monotonic() - started
    assert child.returncode == 0, "stopped by its second SIGINT, not killed"
    assert elapsed < GRACE_SECONDS / 2
    assert "did not stop" not in capsys.readouterr().err
