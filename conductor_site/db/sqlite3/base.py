"""Django's SQLite backend, with the threads of one process taking turns to write.

SQLite lets one connection write at a time. Every transaction here begins
``IMMEDIATE`` (settings), and a connection that finds the write lock taken
waits in SQLite's busy handler, which sleeps 1, 2, 5, 10 … 100 ms between
tries. When many threads of one process write at once (the dispatcher runs
each task in a thread of its own, and each records its start and its
outcome), most of their time went in those sleeps. Here a thread takes a
lock of its process's own, one per database file, before ``BEGIN
IMMEDIATE`` and gives it back at commit or rollback: a waiting thread
begins the moment the one before it commits. Other processes still queue in
the busy handler; writes outside a transaction (autocommit statements) do
not take the lock. The wait is bounded by the connection's busy timeout,
after which SQLite's own lock decides, as before.
"""

from __future__ import annotations

import threading

from django.db.backends.sqlite3 import base

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _write_lock(name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(name, threading.Lock())


class DatabaseWrapper(base.DatabaseWrapper):
    _held_write_lock: threading.Lock | None = None

    def _start_transaction_under_autocommit(self) -> None:
        lock = _write_lock(str(self.settings_dict["NAME"]))
        acquired = lock.acquire(timeout=float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5)))
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            if acquired:
                lock.release()
            raise
        self._held_write_lock = lock if acquired else None

    def _release_write_lock(self) -> None:
        lock, self._held_write_lock = self._held_write_lock, None
        if lock is not None:
            lock.release()

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:
            self._release_write_lock()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._release_write_lock()

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._release_write_lock()
