"""Run test code in several real OS processes against the test databases.

Children are started with ``spawn``: fresh interpreters that share nothing with
the test process but the databases (and Redis), as separate dispatchers or
servers would. The test calling this must use ``transaction=True`` so that its
rows are committed and visible to the children; on SQLite the test databases
are files (see settings) for the same reason.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from multiprocessing.pool import AsyncResult
from typing import Any

from django.db import connections


def test_database_names() -> dict[str, str]:
    """The test database name of every alias, as the test process sees them."""
    return {alias: str(connections[alias].settings_dict["NAME"]) for alias in connections}


def database_url(alias: str = "default") -> str:
    """A DATABASE_URL that points a child process at this alias's test database."""
    config = connections[alias].settings_dict
    if config["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{config['NAME']}"
    auth = config["USER"] + (f":{config['PASSWORD']}" if config["PASSWORD"] else "")
    return f"postgres://{auth}@{config['HOST'] or '127.0.0.1'}:{config['PORT'] or 5432}/{config['NAME']}"


def _child(database_names: dict[str, str], target: str, args: tuple[Any, ...]) -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conductor_site.settings")
    from django.conf import settings

    for alias, name in database_names.items():
        settings.DATABASES[alias]["NAME"] = name
    import django

    django.setup()
    import tests.kinds  # noqa: F401  (the test-only task kinds, as in the test process)

    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        return function(*args)
    finally:
        from django.db import connections

        connections.close_all()


@contextlib.contextmanager
def started_in_processes(
    target: str, args_per_process: Sequence[tuple[Any, ...]]
) -> Iterator[list[AsyncResult]]:
    """Start ``target`` ("module:function") once per args tuple, each in its own process.

    Yields the pending results, so the test can work beside the children; the
    processes are ended when the block exits.
    """
    names = test_database_names()
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes=len(args_per_process)) as pool:
        yield [pool.apply_async(_child, (names, target, args)) for args in args_per_process]


def run_in_processes(
    target: str, args_per_process: Sequence[tuple[Any, ...]], timeout: float = 120
) -> list[Any]:
    """Call ``target`` once per args tuple, each in its own process; return the results in order.

    Raises if any child raised or timed out.
    """
    with started_in_processes(target, args_per_process) as pending:
        return [result.get(timeout=timeout) for result in pending]


def spawn_process(target: str, args: tuple[Any, ...]) -> multiprocessing.Process:
    """Start ``target`` in one process of its own and return it (to kill it, say)."""
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=_child, args=(test_database_names(), target, args), daemon=True)
    process.start()
    return process
