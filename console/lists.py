"""Changelists that fetch only what their columns show.

A message is 100 KiB of text and its raw frame as much again; an instruction
list joins messages. Django's changelist loads whole rows (and whole related
rows) for a page of short columns, so a list of them moved the full text of
every row it sorted. A ``ModelAdmin`` with ``ListColumnsMixin`` shapes the
changelist's rows in ``get_list_queryset`` (``only()`` the shown fields,
short annotations); its change page still loads whole rows.
"""

from __future__ import annotations

import json

from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.db.models.lookups import IContains


class ListColumnsChangeList(ChangeList):
    def get_queryset(self, request, exclude_parameters=None):
        return self.model_admin.get_list_queryset(super().get_queryset(request, exclude_parameters))


class ListColumnsMixin:
    """Mix into a ``ModelAdmin``; override ``get_list_queryset``.

    Its rows also reach the list's actions, so fields the actions read belong
    in it too (a deferred field costs a query per row).
    """

    def get_changelist(self, request, **kwargs):
        return ListColumnsChangeList

    def get_list_queryset(self, queryset: QuerySet) -> QuerySet:
        """The changelist's queryset, filtered, searched and ordered; return it shaped."""
        return queryset


def count_of(related: QuerySet, *, to: str) -> Coalesce:
    """How many rows of ``related`` point at the outer row through the field ``to``.

    A correlated subquery rather than ``Count()``: a count annotation makes
    the outer query GROUP BY, which on SQLite means grouping (and sorting) by
    every selected column, a message's whole text included.
    """
    rows = related.filter(**{to: OuterRef("pk")}).order_by().values(to).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(rows), 0)


class JSONTextContains(IContains):
    """``icontains`` on a text column that holds ``json.dumps`` output, for a term as JSON writes it.

    The stored text escapes what a chat wrote: quotes and backslashes, control
    characters, and every non-ASCII character (``é`` is stored as ``\\u00e9``).
    The term gets the same escapes, so ``café`` or ``say "hi"`` finds the
    params that hold them. A plain ``LIKE`` on a text column, the same on
    PostgreSQL and SQLite; letters outside ASCII match in their own case only.
    Register it on the field under a name of its own
    (``field.register_lookup(JSONTextContains, "json_icontains")``); its SQL
    is ``icontains``'s, which the databases know by that name.
    """

    def get_prep_lookup(self):
        return json.dumps(str(self.rhs))[1:-1]
