"""What shell.run's sandbox costs a command: the time from the call to its result for ``true``, in
the sandbox as it runs (Landlock allow-list, PID and network namespaces, socket filter), with the
network allowed by policy (no network namespace, no filter), and with the kernel's namespaces
refused and the command run unconfined.

    .venv/bin/python bench/shell_start.py [--runs N]

Prints the median and the 90th percentile of each, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import shell  # noqa: E402
from tools.registry import ToolCall  # noqa: E402

REFUSING_LAUNCHER = Path(__file__).resolve().parents[1] / "tests" / "tools" / "refusing_launcher.py"


def timed(workspace: Path, runs: int, **options) -> list[float]:
    took = []
    for _ in range(runs):
        call = ToolCall(params={"argv": ["true"]}, workspace=workspace, shell_max_timeout_seconds=10,
                        private_folders=(workspace.parent,), **options)
        started = time.perf_counter()
        shell.shell_run(call)
        took.append((time.perf_counter() - started) * 1000)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="conductor-bench-shell-") as data:
        workspace = Path(data) / "workspace"
        workspace.mkdir()
        rows = [("confined (no network)", timed(workspace, runs)),
                ("network allowed by policy", timed(workspace, runs, allow_network=True))]
        shell.LAUNCHER = REFUSING_LAUNCHER
        rows.append(("namespaces refused, unconfined", timed(workspace, runs, unconfined=True)))
    print(f"shell.run of `true`, {runs} runs each: median and p90, ms")
    for name, took in rows:
        p90 = statistics.quantiles(took, n=10)[-1]
        print(f"  {name:32} {statistics.median(took):7.1f} {p90:7.1f}")


if __name__ == "__main__":
    main()
