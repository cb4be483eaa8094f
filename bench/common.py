"""What the benchmarks share: the command line, the summary of a list of
timings, Django set-up and the names of what it configured, a no-op task kind
and a dispatcher that works through its tasks, the dispatcher loops' leases
forgotten, the dispatcher's ticks sampled, a fresh plugin client, the
environment that points a child server or cluster at this process's databases,
a running server or cluster on those databases (stopped with all its processes),
the CPU and memory its processes use, what a plugin sends it, the warnings its
log holds, and a throw-away PostgreSQL database."""

import argparse
import contextlib
import io
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conductor_site.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

# What a process costs (CPU, memory, its children): the scripts import these from here too.
from bench.processes import (  # noqa: E402, F401
    ProcessMeter,
    asgi_pid,
    cpu_seconds,
    process_tree,
    processes_cpu_seconds,
    rss_bytes,
    rss_mib,
    started_at,
)

NOOP_KIND = "bench.noop"
# For a server whose ingest is measured: no frame rate limit, no hourly instruction limit.
UNLIMITED_INGEST = {"CONDUCTOR_MAX_FRAMES_PER_SECOND": "1000000", "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR": "1000000"}


def option_parser(doc: str, **defaults: int | float | str) -> argparse.ArgumentParser:
    """A parser described by the first line of the script's ``doc``, with one option per
    keyword (``per_tick=50`` is ``--per-tick``, default 50) of its default's type."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    return parser


def stop_on_signals() -> None:
    """Make Ctrl-C (SIGINT) and SIGTERM end this process through its ``finally`` and ``with``
    blocks (``KeyboardInterrupt``), so that the servers it started are stopped too. Once one
    came, both are ignored: a second one cannot cut that clean-up short."""

    def stop(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest of ``values`` with at least ``p`` % of them at or
    below it. It is always one of the values, so never past the largest, as an interpolated
    quantile of a few values can be."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summary(values: Sequence[float], *, decimals: int = 0, tail: int = 99) -> str:
    """``median=… p99=… max=…`` of ``values`` with ``decimals`` decimals; ``tail`` picks the middle percentile."""
    return (f"median={statistics.median(values):.{decimals}f} p{tail}={percentile(values, tail):.{decimals}f} "
            f"max={max(values):.{decimals}f}")


def setup_django(*, with_noop_kind: bool = False, migrate: bool = False) -> None:
    """Set Django up; with ``with_noop_kind``, register ``NOOP_KIND``, whose executor does
    nothing; with ``migrate``, migrate every configured database."""
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        # migrate_all names each database it migrates even at verbosity 0.
        call_command("migrate_all", verbosity=0, stdout=io.StringIO())
    if with_noop_kind:
        from automation.kinds import KindSpec, always, kinds
        from automation.outcomes import Success

        kinds.register(KindSpec(name=NOOP_KIND, lane=None, is_idempotent=always,
                                executor=lambda ctx: Success(None)))


def database_engine() -> str:
    """The default database's engine, as the summaries name it: ``sqlite3`` or ``postgresql``."""
    from django.conf import settings

    return settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]


def channel_layer_backend() -> str:
    """The channel layer's backend class: ``DoorbellSQLiteChannelLayer`` (embedded) or ``SealedRedisChannelLayer``."""
    from django.conf import settings

    return settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]


def noop_tasks_create(count: int) -> None:
    """Delete the ``NOOP_KIND`` tasks an earlier run left, then create ``count`` of them."""
    from automation.models import AutomationTask
    from automation.services.tasks import task_create

    AutomationTask.objects.filter(kind=NOOP_KIND).delete()
    for n in range(count):
        task_create(kind=NOOP_KIND, payload={"n": n}, actor="bench")


def noop_dispatcher(*, per_tick: int, owner: str | None = None):
    """A dispatcher that claims up to ``per_tick`` tasks a tick, without jitter or retry backoff."""
    from automation.dispatcher import Dispatcher, DispatcherConfig

    return Dispatcher(owner=owner, config=DispatcherConfig(
        max_tasks_per_tick=per_tick, lease_ms=60_000, outbound_jitter_max_ms=0,
        retry_backoff_seconds=(0,), retry_jitter_max_ms=0,
    ))


def dispatch_noop_tasks(dispatcher, *, seconds: float | None = None) -> None:
    """Tick ``dispatcher`` back to back until every ``NOOP_KIND`` task has succeeded, or until
    ``seconds`` have passed."""
    from automation.models import AutomationTask, TaskStatus

    deadline = time.monotonic() + seconds if seconds else math.inf
    open_tasks = AutomationTask.objects.filter(kind=NOOP_KIND).exclude(status=TaskStatus.SUCCEEDED)
    while time.monotonic() < deadline:
        dispatcher.tick()
        if not dispatcher.in_flight() and not open_tasks.exists():
            return


def release_dispatcher_loops() -> None:
    """Forget the loops an earlier run left behind (killed, their rows not pruned yet), and their heartbeats."""
    from automation.models import DispatcherWorker

    DispatcherWorker.objects.all().delete()


class TickSampler:
    """The dispatcher's heartbeats (the newest ``DispatcherWorker.heartbeat_at``, epoch ms: a loop
    beats after a tick, at most every half tick) that happen during the ``with`` block, read every
    ``every`` seconds in a thread of its own: often enough to see each beat of a loop that ticks
    every second or slower. The longest gap between two of them is the longest the dispatcher slept."""

    def __init__(self, *, every: float = 0.05):
        self.ticks: list[int] = []
        self._every = every
        self._stop = threading.Event()
        self._error: BaseException | None = None

    def __enter__(self) -> "TickSampler":
        self.since_ms = time.time_ns() // 1_000_000
        self._thread = threading.Thread(target=self._sample, name="tick-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.until_ms = time.time_ns() // 1_000_000
        if self._error is not None and exc_info[0] is None:
            raise self._error

    def _sample(self) -> None:
        from django.db import connection

        from automation.selectors import dispatcher_worker_newest

        try:
            while not self._stop.wait(self._every):
                newest = dispatcher_worker_newest()
                last = newest.heartbeat_at if newest else None
                if last and last > self.since_ms and (not self.ticks or last != self.ticks[-1]):
                    self.ticks.append(last)
        except BaseException as exc:  # handed to the thread that leaves the block
            self._error = exc
        finally:
            connection.close()

    def intervals(self) -> list[float]:
        """Seconds between consecutive ticks."""
        return [(b - a) / 1000 for a, b in zip(self.ticks, self.ticks[1:], strict=False)]

    def longest_gap(self) -> tuple[float, float]:
        """The longest time without a tick, in seconds, and when it ended, in seconds after the
        block began. The block's start and end count as ticks: a dispatcher that stopped
        ticking has a gap until the end, one that never ticked a gap as long as the block."""
        moments = [self.since_ms, *self.ticks, self.until_ms]
        gap, ended = max(((b - a), b) for a, b in zip(moments, moments[1:], strict=False))
        return gap / 1000, (ended - self.since_ms) / 1000


def broker_queue_purge() -> None:
    """Empty django-q2's queue on the configured broker (the ORM's table, or Redis). Tasks that
    an earlier run queued and never ran were signed with that run's SECRET_KEY: a cluster of
    this run would log each as a bad signature."""
    from django_q.brokers import get_broker

    get_broker().purge_queue()


def fresh_plugin_client(name: str, *, owner: str | None = None):
    """Make the plugin client ``name`` anew (an earlier run's is deleted); return (client, token).

    Each is a browser of its own owner, named as it is, unless ``owner`` is
    given: many browsers of one owner are each told of every other's blocks
    (``instruction.status``), which the cost phase (a team sharing an owner)
    measures and the other phases leave out.
    """
    from django.utils.text import slugify

    from ingest.models import PluginClient
    from ingest.services.clients import plugin_client_create

    PluginClient.objects.filter(client_id=name).delete()
    return plugin_client_create(name=name, owner=owner or slugify(name))


def child_env(data_dir: str, **extra: str) -> dict[str, str]:
    """Environment for a child server or cluster with its own data folder but our
    databases, channel layer and SECRET_KEY (django-q2 signs queued tasks with it)."""
    from django.conf import settings

    env = {**os.environ, "CONDUCTOR_DATA_DIR": data_dir, "SECRET_KEY": settings.SECRET_KEY, **extra}
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        env["DATABASE_URL"] = f"sqlite:///{settings.DATABASES['default']['NAME']}"
    if "channels" in settings.DATABASES:
        env["CONDUCTOR_CHANNEL_LAYER_DB"] = str(settings.DATABASES["channels"]["NAME"])
    return env


def server_url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def plugin_url(port: int) -> str:
    """The plugin's WebSocket on the server at ``port``."""
    return f"ws://127.0.0.1:{port}/ws/plugin/"


def wait_until_healthy(process: subprocess.Popen, port: int, *, timeout: float = 60) -> None:
    """Return once ``/healthz`` on ``port`` answers; exit if ``process`` ends or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise SystemExit(f"server on port {port} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{server_url(port)}/healthz", timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"server on port {port} did not answer") from None
            time.sleep(0.1)


def interrupt(process: subprocess.Popen) -> None:
    """SIGINT to the group of ``process``, as Ctrl-C does; SIGKILL to it if it has not exited 30 s
    later, and then to each of its descendants still running (``manage.py serve`` starts daphne
    and the cluster in sessions of their own, which it stops itself unless it was killed)."""
    if process.poll() is not None:
        return
    below = [(pid, started_at(pid)) for pid in process_tree(process.pid)[1:]]
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for pid, began in below:
        # The start time tells a process left behind from a newer one that got its number.
        if began is not None and started_at(pid) == began:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def running_manage_py(*argv: str, stderr=None, **extra_env: str) -> Iterator[subprocess.Popen]:
    """``manage.py *argv`` in a session of its own, with a throw-away data folder and the
    environment of ``child_env``; yields it, and ends it with ``interrupt``."""
    with tempfile.TemporaryDirectory() as data_dir:
        process = subprocess.Popen([sys.executable, "manage.py", *argv], cwd=ROOT, env=child_env(data_dir, **extra_env),
                                   start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            yield process
        finally:
            interrupt(process)


def interrupt_all(processes: Sequence[subprocess.Popen]) -> None:
    """``interrupt`` each of ``processes`` at the same time, so that stopping them takes as long
    as the slowest rather than the sum."""
    threads = [threading.Thread(target=interrupt, args=(process,)) for process in processes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@contextlib.contextmanager
def running_server(port: int, *, cluster: bool = True, stderr=None, **extra_env: str) -> Iterator[subprocess.Popen]:
    """``manage.py serve`` (as ``make run`` starts it) on ``port``, its log to ``stderr`` (a file;
    this process's stderr when None); yields it once ``/healthz`` answers."""
    with running_manage_py("serve", "--port", str(port), *([] if cluster else ["--no-cluster"]), stderr=stderr,
                           **extra_env) as server:
        wait_until_healthy(server, port)
        yield server


def running_cluster() -> contextlib.AbstractContextManager[subprocess.Popen]:
    """``manage.py qcluster`` (the django-q2 cluster alone), its log discarded."""
    return running_manage_py("qcluster", stderr=subprocess.DEVNULL)


@contextlib.asynccontextmanager
async def plugin_socket(url: str, client_id: str, token: str, **connect_options):
    """A WebSocket to ``url`` on which ``client_id`` has said hello and been answered ``hello.ok``;
    ``connect_options`` go to ``websockets``' ``connect``."""
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None, **connect_options) as ws:
        await ws.send(json.dumps({"type": "hello", "client_id": client_id, "token": token}))
        assert json.loads(await ws.recv())["type"] == "hello.ok"
        yield ws


def final_message(message_id: str, conversation_id: str, text: str) -> dict[str, str]:
    """A ``browser.final_message`` of a Claude answer; its frame id is the message id."""
    return {"type": "browser.final_message", "id": message_id, "platform": "claude",
            "conversation_id": conversation_id, "message_id": message_id, "text": text}


def echo_block(n: int, **params: str) -> str:
    """A ```baa block calling ``echo`` with ``{"n": n}`` and ``params``."""
    return f"```baa\necho\n{json.dumps({'n': n, **params})}\n```"


# A line the servers log at WARNING or above (Django's LOGGING format: date, time, level).
LOGGED_PROBLEM = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (WARNING|ERROR|CRITICAL) ")


def logged_problems(path: Path) -> int:
    """How many warnings and errors the servers logged into the file ``path``."""
    return len(logged_problem_lines(path))


def logged_problem_lines(path: Path) -> list[str]:
    """The warnings and errors the servers logged into the file ``path``, first lines only."""
    with open(path, errors="replace") as log:
        return [line.rstrip("\n") for line in log if LOGGED_PROBLEM.match(line)]


def shown(url: str) -> str:
    """``url`` with its password masked, to be printed."""
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()


def reachable(postgres_url: str, redis_url: str) -> str | None:
    """Why PostgreSQL or Redis cannot be used (None when both answer)."""
    import psycopg
    import redis

    try:
        psycopg.connect(postgres_url, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at {shown(postgres_url)} is not reachable ({str(exc).strip().splitlines()[0]})"
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        return f"Redis at {shown(redis_url)} is not reachable ({exc})"
    return None


@contextlib.contextmanager
def throwaway_database(postgres_url: str) -> Iterator[str]:
    """A new database on the server of ``postgres_url``, dropped afterwards; yields its URL."""
    import psycopg
    from psycopg import sql

    name = f"conductor_bench_{os.getpid()}"
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urllib.parse.urlsplit(postgres_url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
