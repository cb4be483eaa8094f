"""One ``migrate_all`` at a time, per installation.

Two ``make run`` started at once on a fresh data folder both ran ``migrate``
and raced: the slower one failed with ``table "django_content_type" already
exists``. ``migrate_all`` now holds this lock for its whole run; the second
one waits, then finds every migration applied and does nothing.

What is locked follows where the databases are. A SQLite database lives in
the data folder, so its lock is a file there (``migrate.lock``, held with
``flock``, released by the kernel when the process ends, however it ends). A
PostgreSQL database may be shared by servers on several hosts, each with its
own data folder, so its lock is a session-level advisory lock in PostgreSQL
itself, taken on a connection of its own: ``migrate`` may close or replace
the connection it uses, and closing the session would drop the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings
from django.db import connections

LOCK_FILE_NAME = "migrate.lock"
# Any fixed 64-bit key, the same in every process: b"cndctmig" read as a number.
ADVISORY_LOCK_KEY = 7164774435510905191


def _no_note(_text: str) -> None:
    pass


@contextlib.contextmanager
def _file_locked(path: Path, note: Callable[[str], None]) -> Iterator[None]:
    # O_NOFOLLOW: a link planted in the data folder is not followed to some other file.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note(f"Waiting for another migrate_all to finish (it holds {path})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


@contextlib.contextmanager
def _advisory_locked(alias: str, note: Callable[[str], None]) -> Iterator[None]:
    connection = connections.create_connection(alias)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
            if not cursor.fetchone()[0]:
                note(f"Waiting for another migrate_all to finish (it holds database '{alias}')")
                cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
        yield
    finally:
        # Ending the session releases the lock too, also when the unlock was never reached.
        connection.close()


@contextlib.contextmanager
def migrations_locked(*, note: Callable[[str], None] = _no_note) -> Iterator[None]:
    """Hold the installation's migration lock for the block: one per PostgreSQL database, one for the data folder.

    Blocks while another process holds it, after calling ``note`` with a line
    saying so. Locks are taken in the order of ``settings.DATABASES``, the
    same in every process, so two processes never hold one each and wait on
    each other.
    """
    with contextlib.ExitStack() as stack:
        locked: set[tuple[str, ...]] = set()
        for alias, config in settings.DATABASES.items():
            if connections[alias].vendor == "postgresql":
                # Two aliases of one database: one lock, or the second would wait on the first.
                lock = ("postgresql", str(config.get("HOST")), str(config.get("PORT")), str(config["NAME"]))
                enter = functools.partial(_advisory_locked, alias, note)
            else:
                lock = ("data folder",)
                enter = functools.partial(_file_locked, Path(settings.DATA_DIR) / LOCK_FILE_NAME, note)
            if lock not in locked:
                stack.enter_context(enter())
                locked.add(lock)
        yield
