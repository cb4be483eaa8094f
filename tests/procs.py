"""Run test code in several real OS processes against the test database.

Children are started with ``spawn``: fresh interpreters that share nothing with
the test process but the database, as separate dispatchers or servers would.
The test calling this must use ``transaction=True`` so that its rows are
committed and visible to the children; on SQLite the test database is a file
(see settings) for the same reason.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
from collections.abc import Sequence
from typing import Any

from django.db import connection


def _child(database_name: str, target: str, args: tuple[Any, ...]) -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conductor_site.settings")
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = database_name
    import django

    django.setup()
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        return function(*args)
    finally:
        from django.db import connections

        connections.close_all()


def run_in_processes(target: str, args_per_process: Sequence[tuple[Any, ...]], timeout: float = 120) -> list[Any]:
    """Call ``target`` ("module:function") once per args tuple, each in its own process.

    Returns the results in order. Raises if any child raised or timed out.
    """
    database_name = str(connection.settings_dict["NAME"])
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes=len(args_per_process)) as pool:
        pending = [
            pool.apply_async(_child, (database_name, target, args)) for args in args_per_process
        ]
        return [result.get(timeout=timeout) for result in pending]
