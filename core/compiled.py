"""A query the ORM builds and compiles once per shape, then runs with a new clock and new ids.

Django builds a queryset's ``Query`` and compiles it to SQL on every
evaluation. For the dispatcher's claim, which runs several times a message,
that Python work cost more than the database's own (``bench/profile.py``).
``CompiledOnce`` compiles a query the first time a shape is asked for, with
stand-in values, and learns where each value goes in the statement's
parameters: a stand-in id where an id goes, the stand-in clock where the
clock goes. A second compile with the clock one millisecond later finds every
parameter the query derives from the clock (``last_seen_at >= now - window``):
each must move with it one for one, or the query is refused
(``NotCompilable``). The rules stay where they are written, as ORM
expressions; only their compiling is done once. A changed setting (a test's
``override_settings``) forgets every compiled statement: a query may read one.
"""

from __future__ import annotations

import datetime as dt
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.signals import setting_changed
from django.db import connections
from django.db.models import QuerySet

# A clock far from any real one (the year 8307), and ids no row has (a text id, or a number).
_STAND_IN_NOW = 200_000_000_000_000
_STAND_INS: dict[type, Callable[[int], Any]] = {
    str: "\x1fstand-in-{}".format,
    int: lambda n: -7_000_000_000_000_000 - n,
}
# Statements kept per query: its shapes are few (kinds, a count, how many ids), so this is a bound, not a size.
MAX_SHAPES = 512

Build = Callable[[Any, int, Sequence[Any] | None], QuerySet]  # (shape, now, ids) -> the query


class NotCompilable(ValueError):
    """A parameter of the query moved with the clock other than one for one."""


@dataclass(frozen=True)
class _Statement:
    sql: str
    params: tuple[Any, ...]  # as compiled with the stand-ins
    ids_at: dict[int, int]  # parameter position -> index in the ids
    clock_at: tuple[int, ...]  # positions of the parameters that move with the clock

    def bound(self, now: int, ids: Sequence[Any] | None, connection) -> list[Any]:
        params = list(self.params)
        for position, index in self.ids_at.items():
            params[position] = ids[index]
        for position in self.clock_at:
            params[position] = _moved(params[position], now - _STAND_IN_NOW, connection)
        return params


def _moved(value: Any, ms: int, connection) -> Any:
    """``value`` moved ``ms`` milliseconds: a clock, a datetime, or a datetime as the database takes it as text."""
    if isinstance(value, bool):
        raise NotCompilable(f"a flag moved with the clock: {value!r}")
    if isinstance(value, int):
        return value + ms
    if isinstance(value, dt.datetime):
        return value + dt.timedelta(milliseconds=ms)
    if isinstance(value, str):
        try:
            moved = dt.datetime.fromisoformat(value) + dt.timedelta(milliseconds=ms)
        except ValueError:
            raise NotCompilable(f"a text moved with the clock: {value!r}") from None
        return connection.ops.adapt_datetimefield_value(moved)  # as the backend wrote it (SQLite: text)
    raise NotCompilable(f"a {type(value).__name__} moved with the clock")


class CompiledOnce:
    """``build(shape, now, ids)``'s queryset compiled once per ``shape`` and database, run as ``rows(...)``.

    ``build`` must make the query from its arguments and the shape alone
    (the shape names everything else it reads: the kinds, the limit, how
    many ids); ``ids`` (texts, or numbers with ``ids_are=int``) go where the
    query compares them, ``now`` where it compares the clock or what it
    derives from it one for one.
    """

    def __init__(self, build: Build, *, ids_are: type = str) -> None:
        self._build = build
        self._stand_in = _STAND_INS[ids_are]
        self._ids_are = ids_are
        self._statements: dict[tuple[str, Hashable], _Statement] = {}
        self._lock = threading.Lock()
        _instances.add(self)

    def forget(self) -> None:
        with self._lock:
            self._statements.clear()

    def rows(self, shape: Hashable, *, now: int, ids: Sequence[Any] | None = None, using: str = "default") -> list[tuple]:
        """The rows of the query for ``now`` and ``ids`` (``values_list``'s tuples, as the database returns them)."""
        sql, params = self.statement(shape, now=now, ids=ids, using=using)
        with connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def statement(
        self, shape: Hashable, *, now: int, ids: Sequence[Any] | None = None, using: str = "default",
    ) -> tuple[str, list[Any]]:
        """The query's SQL and parameters for ``now`` and ``ids``, as its compiler's ``as_sql`` gives them."""
        connection = connections[using]
        statement = self._statement((using, shape), None if ids is None else len(ids), connection)
        return statement.sql, statement.bound(now, ids, connection)

    def _statement(self, key: tuple[str, Hashable], id_count: int | None, connection) -> _Statement:
        full_key = (*key, id_count)
        statement = self._statements.get(full_key)
        if statement is None:
            statement = self._compile(key[1], id_count, connection)
            with self._lock:
                if len(self._statements) >= MAX_SHAPES:  # shapes a caller did not bound: start again
                    self._statements.clear()
                self._statements.setdefault(full_key, statement)
        return statement

    def _compile(self, shape: Hashable, id_count: int | None, connection) -> _Statement:
        stand_ins = None if id_count is None else [self._stand_in(n) for n in range(id_count)]
        sql, params = self._build(shape, _STAND_IN_NOW, stand_ins).query.get_compiler(connection.alias).as_sql()
        later_sql, later = self._build(shape, _STAND_IN_NOW + 1, stand_ins).query.get_compiler(connection.alias).as_sql()
        if later_sql != sql or len(later) != len(params):
            raise NotCompilable("the statement's text depends on the clock")
        index_of = {stand_in: n for n, stand_in in enumerate(stand_ins or ())}
        ids_at = {position: index_of[value] for position, value in enumerate(params)
                  if type(value) is self._ids_are and value in index_of}
        clock_at = tuple(position for position, (first, second) in enumerate(zip(params, later, strict=True))
                         if first != second)
        for position in clock_at:
            if _moved(params[position], 1, connection) != later[position]:
                raise NotCompilable(f"parameter {position} moved with the clock other than one for one")
        if len(ids_at) != len(index_of):
            raise NotCompilable("not every id went into the statement as a parameter of its own")
        return _Statement(sql=sql, params=tuple(params), ids_at=ids_at, clock_at=clock_at)


_instances: weakref.WeakSet[CompiledOnce] = weakref.WeakSet()


def _forget_all(**kwargs: Any) -> None:
    for instance in list(_instances):
        instance.forget()


setting_changed.connect(_forget_all, dispatch_uid="core.compiled.forget")
