"""The data folder and the database files are private to the user who runs Conductor.

They hold the secret key, the sessions (whose keys let anyone who reads them
act as a logged-in operator) and every conversation. The folder is made 0700
and each SQLite database file 0600 before anything opens it; SQLite gives a
database's -wal, -shm and -journal files the mode of the database file, so
those follow without help.

The process umask is left alone on purpose. It also governs what tools and
their shell commands write into the workspace: the user's own work, which
keeps the modes the user's umask gives it, also when ``CONDUCTOR_WORKSPACE``
points at a folder outside the data folder. The default workspace sits inside
the data folder, so other users cannot reach it anyway.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def _narrow(path: Path, mode: int) -> None:
    """Take from ``path`` every permission bit ``mode`` lacks.

    Only for paths of our own, and never a sticky folder: that is a shared one
    such as /tmp, set as the data folder by mistake, not ours to lock others out of.
    """
    info = path.stat()
    if info.st_uid != os.geteuid() or info.st_mode & stat.S_ISVTX:
        return
    current = stat.S_IMODE(info.st_mode)
    if current & ~mode:
        path.chmod(current & mode)


def private_folder(path: Path) -> None:
    """Create ``path`` (and missing parents) with the folder as 0700, or narrow an existing one to 0700."""
    path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    _narrow(path, FOLDER_MODE)


def private_file(path: Path) -> None:
    """Create ``path`` empty as 0600 unless it exists, or narrow an existing one to 0600."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        _narrow(path, FILE_MODE)


def private_sqlite_database(name: str | Path) -> None:
    """Make a SQLite database file private before SQLite creates it as 0644.

    An empty file is a valid empty database. Files left by an earlier run (the
    database and its companions) are narrowed too. In-memory databases, URIs
    and files in a folder that does not exist (SQLite reports that itself, on
    connecting) are left alone.
    """
    text = str(name)
    if not text or text == ":memory:" or text.startswith("file:"):
        return
    path = Path(text)
    if not path.parent.is_dir():
        return
    private_file(path)
    for suffix in SQLITE_COMPANIONS:
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            _narrow(companion, FILE_MODE)


def not_private(path: Path) -> str | None:
    """Why ``path`` is not private to this user (owned by another user, or writable by group or others); None when it is, or is missing.

    Such a data folder, channel layer database or doorbell registry lets
    that user read the doorbells' secrets or replace what this server reads:
    the server refuses to start on it (``conductor_site.checks``).
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    if info.st_uid != os.geteuid():
        return f"is owned by another user (uid {info.st_uid}, not {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None
