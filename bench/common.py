"""What the benchmarks share: the command line, the summary of a list of
timings, Django set-up and the names of what it configured, a no-op task kind
and a dispatcher that works through its tasks, the dispatcher loops' leases
forgotten, a fresh plugin client, the environment that points a child server
or cluster at this process's databases, a running server or cluster on those
databases, and what a plugin sends it."""

import argparse
import contextlib
import io
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conductor_site.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

NOOP_KIND = "bench.noop"
# For a server whose ingest is measured: no frame rate limit, no hourly instruction limit.
UNLIMITED_INGEST = {"CONDUCTOR_MAX_FRAMES_PER_SECOND": "1000000", "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR": "1000000"}


def option_parser(doc: str, **defaults: int | float) -> argparse.ArgumentParser:
    """A parser described by the first line of the script's ``doc``, with one option per
    keyword (``per_tick=50`` is ``--per-tick``, default 50) of its default's type."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    return parser


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
    """The channel layer's backend class: ``DoorbellSQLiteChannelLayer`` (embedded) or ``RedisChannelLayer``."""
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


def dispatch_noop_tasks(dispatcher) -> None:
    """Tick ``dispatcher`` back to back until every ``NOOP_KIND`` task has succeeded."""
    from automation.models import AutomationTask, TaskStatus

    open_tasks = AutomationTask.objects.filter(kind=NOOP_KIND).exclude(status=TaskStatus.SUCCEEDED)
    while True:
        dispatcher.tick()
        if not dispatcher.in_flight() and not open_tasks.exists():
            return


def release_dispatcher_loops() -> None:
    """Forget the run and standby leases that an earlier run's dispatcher loops may have left behind."""
    from automation.models import DispatcherState

    DispatcherState.objects.update_or_create(
        pk=1, defaults={"run_owner": "", "run_until": None, "standby_owner": "", "standby_until": None}
    )


def fresh_plugin_client(name: str):
    """Make the plugin client ``name`` anew (an earlier run's is deleted); return (client, token)."""
    from ingest.models import PluginClient
    from ingest.services.clients import plugin_client_create

    PluginClient.objects.filter(client_id=name).delete()
    return plugin_client_create(name=name)


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
    """SIGINT to the group of ``process``, as Ctrl-C does; SIGKILL to it if it has not exited 30 s later."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def running_manage_py(*argv: str, stderr: int | None = None, **extra_env: str) -> Iterator[subprocess.Popen]:
    """``manage.py *argv`` in a session of its own, with a throw-away data folder and the
    environment of ``child_env``; yields it, and ends it with ``interrupt``."""
    with tempfile.TemporaryDirectory() as data_dir:
        process = subprocess.Popen([sys.executable, "manage.py", *argv], cwd=ROOT, env=child_env(data_dir, **extra_env),
                                   start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            yield process
        finally:
            interrupt(process)


@contextlib.contextmanager
def running_server(port: int, *, cluster: bool = True, **extra_env: str) -> Iterator[subprocess.Popen]:
    """``manage.py serve`` (as ``make run`` starts it) on ``port``; yields it once ``/healthz`` answers."""
    with running_manage_py("serve", "--port", str(port), *([] if cluster else ["--no-cluster"]),
                           **extra_env) as server:
        wait_until_healthy(server, port)
        yield server


def running_cluster() -> contextlib.AbstractContextManager[subprocess.Popen]:
    """``manage.py qcluster`` (the django-q2 cluster alone), its log discarded."""
    return running_manage_py("qcluster", stderr=subprocess.DEVNULL)


@contextlib.asynccontextmanager
async def plugin_socket(url: str, client_id: str, token: str):
    """A WebSocket to ``url`` on which ``client_id`` has said hello and been answered ``hello.ok``."""
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "hello", "client_id": client_id, "token": token}))
        assert json.loads(await ws.recv())["type"] == "hello.ok"
        yield ws


def final_message(message_id: str, conversation_id: str, text: str) -> dict[str, str]:
    """A ``browser.final_message`` of a Claude answer; its frame id is the message id."""
    return {"type": "browser.final_message", "id": message_id, "platform": "claude",
            "conversation_id": conversation_id, "message_id": message_id, "text": text}


def echo_block(n: int) -> str:
    """A ```baa block calling ``echo`` with ``{"n": n}``."""
    return f'```baa\necho\n{{"n": {n}}}\n```'
