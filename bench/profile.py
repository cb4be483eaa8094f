"""Profile: where the server's CPU goes per process while the cost phase's load runs.

Runs ``bench/cost.py``'s load (--plugins plugins of one owner sending --messages one-block
messages at --rate a second to one ``manage.py serve``, on the database and channel layer of the
environment) while ``py-spy record`` (the bench dependency group) samples daphne and the
dispatcher loop at --hz (only the threads holding the GIL: the CPU of Python code, not its waits), each for the
whole window. Prints, per role, the project's functions
that were on the stack in the largest share of the samples (inclusive) and the frames that were
running (self, any code: Django, psycopg, asyncio), then the ``cost`` line of the same run, so a
change to the hot path starts from a measurement and is measured the same way after.

    uv run --frozen --group bench python bench/profile.py [--messages 200 --top 25]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench_profile REDIS_URL=redis://127.0.0.1:6379/12 \\
        uv run --frozen --group bench python bench/profile.py

py-spy reads the processes' memory (ptrace): run it as root, or where
``/proc/sys/kernel/yama/ptrace_scope`` is 0.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    ROOT, broker_queue_purge, channel_layer_backend, database_engine, option_parser, process_tree, running_server,
    setup_django, stop_on_signals,
)
from bench.cost import CONNECT_SECONDS, measure, role_of  # noqa: E402

PROFILED_ROLES = ("daphne", "dispatcher")
# py-spy's raw (collapsed) format: one stack a line, frames root first, ";" between them, the count last.
FRAME_SEPARATOR = ";"


def frame_name(frame: str) -> str:
    """``function (path:line)`` as ``path:function``, the path from the project's root when inside it."""
    function, _, place = frame.partition(" (")
    path = place.rsplit(":", 1)[0].rstrip(")")
    root = f"{ROOT}/"
    return f"{path.removeprefix(root)}:{function.strip()}"


def is_project_frame(name: str) -> bool:
    return not name.startswith("/") and ".venv/" not in name and not name.startswith("<")


def tally_stacks(lines) -> tuple[Counter, Counter, int]:
    """Inclusive counts of the project's functions, self counts of every frame, and the samples."""
    inclusive: Counter = Counter()
    running: Counter = Counter()
    samples = 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        names = [frame_name(frame) for frame in stack.split(FRAME_SEPARATOR)]
        n = int(count)
        samples += n
        running[names[-1]] += n
        for name in set(names):
            if is_project_frame(name):
                inclusive[name] += n
    return inclusive, running, samples


def report(role: str, path: Path, top: int) -> list[str]:
    """The lines printed for one role's recording."""
    if not path.exists():
        return [f"profile role={role} samples=0 (py-spy wrote nothing)"]
    with path.open() as lines:
        inclusive, running, samples = tally_stacks(lines)
    out = [f"profile role={role} samples={samples}"]
    if not samples:
        return out
    out += [f"  inclusive {100 * n / samples:5.1f}% {name}" for name, n in inclusive.most_common(top)]
    out += [f"  self      {100 * n / samples:5.1f}% {name}" for name, n in running.most_common(top)]
    return out


def recorders(server_pid: int, folder: Path, *, seconds: float, hz: int, py_spy: str) -> dict[str, tuple]:
    """One ``py-spy record`` per profiled role of the server's processes, for ``seconds``."""
    started = {}
    for pid in process_tree(server_pid):
        role = role_of(pid, server_pid)
        if role in PROFILED_ROLES and role not in started:
            out = folder / f"{role}.txt"
            process = subprocess.Popen(
                [py_spy, "record", "--pid", str(pid), "--rate", str(hz), "--duration", str(int(seconds) + 1),
                 "--format", "raw", "--nonblocking", "--gil", "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
            started[role] = (process, out)
    return started


def main() -> None:
    args = option_parser(__doc__, port=9176, settle=8.0, plugins=20, messages=200, rate=10.0, drain_seconds=30.0,
                         hz=100, top=25).parse_args()
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if not py_spy:
        sys.exit("py-spy is missing: run with `uv run --group bench` (the bench dependency group holds it)")
    stop_on_signals()
    setup_django(migrate=True)
    print(f"configuration database={database_engine()} layer={channel_layer_backend()}", flush=True)
    broker_queue_purge()
    window = CONNECT_SECONDS + args.messages / args.rate + 5
    with tempfile.TemporaryDirectory() as folder, running_server(
        args.port, CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0", CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR="1000000",
    ) as server:
        time.sleep(args.settle)
        started = recorders(server.pid, Path(folder), seconds=window, hz=args.hz, py_spy=py_spy)
        cost = measure(server, args.port, plugins=args.plugins, messages=args.messages, rate=args.rate,
                       drain_seconds=args.drain_seconds)
        for role, (process, path) in started.items():
            _, errors = process.communicate(timeout=window + 30)
            if process.returncode:
                print(f"py-spy for {role} ended with {process.returncode}: {errors.decode().strip()[-300:]}", flush=True)
            print("\n".join(report(role, path, args.top)), flush=True)
    print(cost.line(), flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
