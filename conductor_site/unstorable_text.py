"""A request that carries text no database can store is answered 400, before any view queries with it.

A NUL in an admin list's filter (``?status__exact=%00``), in a search, in a
path (``/admin/…/%00/change/``) or in a posted reason reaches PostgreSQL as a
query parameter and comes back as a ``DataError``: a 500, and the action not
done. Filters, searches, object ids and forms are many, so they are checked
here, once, for every page: the path, the query string, the posted form, the
cookies and the headers. A request refused here changed nothing. The plugin's
socket is not HTTP and checks its own frames (``ingest/jsoncheck.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

from core.text import is_storable

# Form bodies Django parses into ``request.POST``; any other body is a view's own to read.
FORM_CONTENT_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def request_texts(request: HttpRequest) -> Iterable[str]:
    """Every text of ``request`` a view may put in a query."""
    yield request.path
    forms = [request.GET]
    if request.method == "POST" and request.content_type in FORM_CONTENT_TYPES:
        forms.append(request.POST)
    for form in forms:
        for key, values in form.lists():
            yield key
            yield from values
    yield from request.COOKIES.keys()
    yield from request.COOKIES.values()
    yield from (value for key, value in request.META.items() if key.startswith("HTTP_") and isinstance(value, str))


class UnstorableTextMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not all(is_storable(text) for text in request_texts(request)):
            return HttpResponseBadRequest(
                "This request holds a NUL or a lone surrogate, which cannot be stored or searched for.",
                content_type="text/plain; charset=utf-8",
            )
        return self.get_response(request)
