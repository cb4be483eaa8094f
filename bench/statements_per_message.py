"""SQL statements per message, end to end, as PostgreSQL itself counts them (``log_statement = all``).

Creates a throw-away database on the server of ``--postgres-url`` with
``log_statement = all``, starts one ``manage.py serve`` on it (daphne, the
server's dispatcher loop and the django-q2 cluster, as ``make run`` does;
the channel layer of ``REDIS_URL`` when set), and counts the statements its
log gains, by process: first over ``--idle-seconds`` with nothing to do (the
dispatcher's ticks, presence), then while ``--messages`` messages with one
``echo`` block go through one at a time (as ``delivery_latency.py`` sends
them, each delivery answered 200 at once). Statements per message =
(statements during the messages − the idle rate × their duration) /
messages. Prints the total, the share of each process (the ASGI server, the
dispatcher loop, the cluster, others) and the commonest statement shapes,
per message.

Needs a PostgreSQL whose server log this user can read (``--log``, Debian's
default path by default) and a superuser to set ``log_statement``.

    uv run python bench/statements_per_message.py [--messages 50]
    REDIS_URL=redis://127.0.0.1:6379/14 uv run python bench/statements_per_message.py
"""

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import option_parser  # noqa: E402

LINE = re.compile(r"^\S+ \S+ \S+ \[(?P<pid>\d+)\] (?P<user>[^@\s]*)@(?P<db>\S+) LOG:  statement: (?P<sql>.*)$")
# A statement's shape: its literals and parameter placeholders as ?, its IN lists as one.
SHAPE_SUBS = [(re.compile(r"'(?:[^']|'')*'"), "?"), (re.compile(r"\$\d+"), "?"), (re.compile(r"\b\d+\b"), "?"),
              (re.compile(r"\(\?(?:, \?)*\)"), "(?)")]


def shape(sql: str) -> str:
    for pattern, replacement in SHAPE_SUBS:
        sql = pattern.sub(replacement, sql)
    return sql[:140]


def statements(log: Path, offset: int, database: str) -> list[tuple[int, str]]:
    """(pid, sql) of every statement logged for ``database`` after byte ``offset`` of ``log``."""
    found = []
    with log.open("rb") as handle:
        handle.seek(offset)
        for raw in handle:
            match = LINE.match(raw.decode("utf-8", "replace").rstrip("\n"))
            if match and match["db"] == database:
                found.append((int(match["pid"]), match["sql"]))
    return found


def backend_roles(database: str) -> dict[int, str]:
    """Each backend of ``database`` by the role of the process at its other end: asgi, dispatcher, cluster or other.

    PostgreSQL logs its backend's pid; the client's local port (pg_stat_activity) names the
    process that holds it (``ss``), whose command line says what it is.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, client_port FROM pg_stat_activity WHERE datname = %s", [database])
        ports = {port: pid for pid, port in cursor.fetchall() if port}
    roles = {}
    for line in subprocess.run(["ss", "-tnpH"], capture_output=True, text=True).stdout.splitlines():
        match = re.search(r":(\d+)\s+\S+:5432\s+users:\(\(\"[^\"]*\",pid=(\d+)", line)
        if not match or int(match[1]) not in ports:
            continue
        try:
            command = Path(f"/proc/{match[2]}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        role = ("asgi" if "daphne" in command else "dispatcher" if " dispatch " in f"{command} "
                else "cluster" if "qcluster" in command else "other")
        roles[ports[int(match[1])]] = role
    return roles


def psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, capture_output=True)


def main() -> None:
    args = option_parser(__doc__, messages=50, warmup=3, port=8961, idle_seconds=10.0,
                         postgres_url="postgres://postgres@127.0.0.1:5432/postgres",
                         log="/var/log/postgresql/postgresql-15-main.log").parse_args()
    log = Path(args.log)
    database = f"conductor_statements_{os.getpid()}"
    psql(args.postgres_url, f"CREATE DATABASE {database}")
    try:
        psql(args.postgres_url, f"ALTER DATABASE {database} SET log_statement = 'all'")
        os.environ["DATABASE_URL"] = args.postgres_url.rsplit("/", 1)[0] + f"/{database}"
        measure(args, log, database)
    finally:
        psql(args.postgres_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def measure(args, log: Path, database: str) -> None:
    from bench.common import fresh_plugin_client, plugin_url, running_server, setup_django
    from bench.delivery_latency import measure_sent

    setup_django(migrate=True)
    _, token = fresh_plugin_client("bench-delivery")
    with running_server(args.port, CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0", LOG_LEVEL="WARNING"):
        time.sleep(3)  # the server's dispatcher loop starts
        start = log.stat().st_size
        time.sleep(args.idle_seconds)
        idle = statements(log, start, database)
        start, began = log.stat().st_size, time.monotonic()
        sent = measure_sent(plugin_url(args.port), token, args.messages, args.warmup)
        seconds = time.monotonic() - began
        time.sleep(1)  # the log catches up
        busy = statements(log, start, database)
        roles = backend_roles(database)
    messages = len(sent) + args.warmup
    idle_rate = len(idle) / args.idle_seconds
    per_message = (len(busy) - idle_rate * seconds) / messages
    print(f"database=postgresql layer={'redis' if os.environ.get('REDIS_URL') else 'channels_lite'} "
          f"messages={messages} seconds={seconds:.1f} idle_statements_per_s={idle_rate:.1f}")
    print(f"statements_per_message {per_message:.1f}")
    by_role = Counter(roles.get(pid, "other") for pid, _ in busy)
    for role, count in sorted(by_role.items()):
        print(f"role {role:<11} {count / messages:.1f} per message")
    shapes = Counter(shape(sql) for _, sql in busy)
    for sql, count in shapes.most_common(25):
        print(f"{count / messages:6.2f}  {sql}")


if __name__ == "__main__":
    main()
