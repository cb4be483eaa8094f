"""``make bench``: the issue's goals, measured in the embedded configuration and on
PostgreSQL + Redis, printed as one table.

Runs ``bench/suite_phases.py`` once per configuration, each with its own data
folder, server ports and database: the embedded default (SQLite, the
channels_lite layer, django-q2's ORM broker) and PostgreSQL + Redis (a
throw-away database it creates on --postgres and drops at the end, and the
Redis database --redis). A configuration whose PostgreSQL or Redis does not
answer is skipped, and a line says so. Both configurations go through their
idle phases at the same time; then each runs its load phases in turn, so no
load overlaps another measurement. Each measurement's raw line is printed as it
completes, the table at the end (``bench/goals.py`` judges the figures;
``bench/README.md`` says how each is measured). The exit status is 0 when every
figure was measured, whether or not it met its goal, and 1 otherwise.

    make bench [BENCH_ARGS="--idle-seconds 60 --messages 50"]
    BENCH_POSTGRES_URL=postgres://me:secret@db:5432/postgres BENCH_REDIS_URL=redis://cache:6379/3 make bench
    uv run python bench/suite.py --configurations embedded
"""

import contextlib
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    logged_problems, option_parser, reachable, stop_on_signals, throwaway_database,
)
from bench.goals import CONFIGURATIONS, EMBEDDED, NOT_MEASURED, POSTGRES, rows, table  # noqa: E402
from bench.suite_phases import PHASE_OPTIONS  # noqa: E402

IDLE_DONE = "@idle-done"
# Ports of a configuration: its server, then its ingest server.
PORTS_PER_CONFIGURATION = 2
# How long a configuration's process may take to stop its servers once asked.
STOP_SECONDS = 60


class Configuration:
    """One configuration's ``suite_phases.py`` process, and the raw lines it printed by tag."""

    def __init__(self, name: str, env: dict[str, str], argv: list[str], events: queue.Queue, log: Path):
        self.name = name
        self.log = log
        log.write_bytes(b"")
        self.lines: dict[str, str] = {}
        self.idle_done = self.ended = False
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "suite_phases.py"), *argv, "--log", str(log)], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        threading.Thread(target=self._read, args=(events,), daemon=True).start()

    def _read(self, events: queue.Queue) -> None:
        for line in self.process.stdout:
            events.put((self, line.rstrip("\n")))
        events.put((self, None))

    def go(self) -> None:
        """Let it start its load phases (one that has just died is seen ending by ``follow``)."""
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write("go\n")
            self.process.stdin.close()

    def stop(self) -> None:
        """End it if it still runs: SIGTERM, on which it stops its servers (a second signal, if
        Ctrl-C reached it too, is ignored), then SIGKILL if it has not ended in time."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            self.process.stdin.close()

    def logged_problems(self) -> int:
        """How many warnings and errors its servers logged."""
        return logged_problems(self.log)

    @property
    def failed(self) -> bool:
        return self.ended and self.process.returncode != 0


def follow(events: queue.Queue, started: float, until) -> None:
    """Print and keep each configuration's lines as they come, until ``until()`` holds."""
    while not until():
        configuration, line = events.get()
        if line is None:
            configuration.process.wait()
            configuration.ended = True
        elif line == IDLE_DONE:
            configuration.idle_done = True
        else:
            configuration.lines.setdefault(line.split(" ", 1)[0], line)
            print(f"[{time.monotonic() - started:5.0f} s] {configuration.name:<14} {line}", flush=True)


def configuration_env(data_dir: Path, *, database_url: str, redis_url: str) -> dict[str, str]:
    """The environment of a configuration: its own data folder, database and Redis ("" for none)."""
    data_dir.mkdir()
    env = {**os.environ, "CONDUCTOR_DATA_DIR": str(data_dir), "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    env.pop("CONDUCTOR_CHANNEL_LAYER_DB", None)
    return env


def phase_argv(args) -> list[str]:
    return [part for name in PHASE_OPTIONS for part in (f"--{name.replace('_', '-')}", str(getattr(args, name)))]


def main() -> int:
    parser = option_parser(
        __doc__, port=9140, logs=str(Path(tempfile.gettempdir()) / "conductor-bench-logs"),
        postgres=os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        redis=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"),
        configurations=",".join(CONFIGURATIONS), **PHASE_OPTIONS,
    )
    args = parser.parse_args()
    stop_on_signals()
    started = time.monotonic()
    wanted = args.configurations.split(",")
    skipped = [f"{name}: skipped, not in --configurations" for name in CONFIGURATIONS if name not in wanted]
    with tempfile.TemporaryDirectory(prefix="conductor-bench-") as data_dir, contextlib.ExitStack() as stack:
        envs = {}
        if EMBEDDED in wanted:
            envs[EMBEDDED] = configuration_env(Path(data_dir) / EMBEDDED, database_url=(
                f"sqlite:///{Path(data_dir) / EMBEDDED / 'conductor.sqlite3'}"), redis_url="")
        if POSTGRES in wanted:
            if why := reachable(args.postgres, args.redis):
                skipped.append(f"{POSTGRES}: skipped, {why}")
                print(skipped[-1], flush=True)
            else:
                database_url = stack.enter_context(throwaway_database(args.postgres))
                envs[POSTGRES] = configuration_env(Path(data_dir) / "postgres", database_url=database_url,
                                                   redis_url=args.redis)
        print(f"make bench: {', '.join(envs) or 'no configuration'}; idle phases together "
              f"(about {args.settle + args.quiet_seconds + args.idle_seconds + 20:.0f} s), "
              "then each configuration's load phases in turn", flush=True)

        events: queue.Queue = queue.Queue()
        configurations = []
        logs = Path(args.logs)
        logs.mkdir(parents=True, exist_ok=True)
        try:
            for n, (name, env) in enumerate(envs.items()):
                port = args.port + n * PORTS_PER_CONFIGURATION
                configurations.append(Configuration(name, env, ["--port", str(port), *phase_argv(args)], events,
                                                    logs / f"{name}.log"))
            follow(events, started, lambda: all(c.idle_done or c.ended for c in configurations))
            for configuration in configurations:
                if not configuration.ended:
                    configuration.go()
                    follow(events, started, lambda c=configuration: c.ended)
        finally:
            for configuration in configurations:
                configuration.stop()

    judged = rows({c.name: c.lines for c in configurations})
    print()
    print(table(judged))
    for line in skipped:
        print(line)
    for configuration in configurations:
        if problems := configuration.logged_problems():
            print(f"{configuration.name}: its servers logged {problems} warnings or errors, "
                  f"in {configuration.log}")
    failed = [c.name for c in configurations if c.failed]
    if failed:
        print(f"could not measure everything in: {', '.join(failed)} (see the errors above)")
    print(f"make bench took {time.monotonic() - started:.0f} s")
    return 1 if failed or any(row.verdict == NOT_MEASURED for row in judged) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("make bench: interrupted; every server it started is stopped", file=sys.stderr)
        sys.exit(130)
