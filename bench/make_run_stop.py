"""How long `make run` takes to stop after Ctrl-C (SIGINT to its process group).

Starts `make run` on a free port with a throw-away data folder, waits for
/healthz, sends SIGINT, and times until every process of the tree is gone.

    uv run python bench/make_run_stop.py [--runs 3]
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import option_parser, wait_until_healthy  # noqa: E402
from tests.server import descendants, free_port  # noqa: E402


def one_run() -> tuple[float, float]:
    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        env = {**os.environ, "CONDUCTOR_DATA_DIR": data_dir}
        started = time.monotonic()
        process = subprocess.Popen(
            ["make", "run", f"PORT={port}"], cwd=ROOT, env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        # make run installs what is missing before it starts the server.
        wait_until_healthy(process, port, timeout=600)
        ready = time.monotonic() - started
        time.sleep(2)  # let the cluster finish starting its workers
        tree = [process.pid, *descendants(process.pid)]
        interrupted = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        while any(Path(f"/proc/{pid}").exists() for pid in tree):
            time.sleep(0.02)
        return ready, time.monotonic() - interrupted


def main() -> None:
    args = option_parser(__doc__, runs=3).parse_args()
    results = [one_run() for _ in range(args.runs)]
    stops = [stop for _, stop in results]
    print(f"runs={args.runs} ready_s=" + ",".join(f"{ready:.1f}" for ready, _ in results))
    print(f"stop_s median={statistics.median(stops):.2f} max={max(stops):.2f}")


if __name__ == "__main__":
    main()
