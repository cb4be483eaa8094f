"""One line instead of a traceback when a command reads a database that was never migrated."""

from __future__ import annotations

# PostgreSQL's "undefined table"; SQLite says "no such table" in its message.
UNDEFINED_TABLE = "42P01"


def unmigrated_hint(exc: BaseException, *, command: str) -> str | None:
    """What to tell the person when ``exc`` says a table is missing; None for any other error."""
    cause = exc.__cause__
    message = str(exc)
    if "no such table" not in message and getattr(cause, "sqlstate", None) != UNDEFINED_TABLE:
        return None
    first = message.strip().splitlines()[0] if message.strip() else type(exc).__name__
    return (
        f"manage.py {command}: the database has no tables yet ({first}). Run `make run` once, or "
        "`.venv/bin/python manage.py migrate_all`, then try again."
    )
