"""The server's side of the live refresh (``console/static/console/live.js``).

The script fetches its page again every few seconds with
``X-Conductor-Live: 1``. Such a fetch is not a page view: the messages waiting
for the operator (an action's report, on its way to another tab) are drawn
into the page it fetches, which marks them as shown, yet the script puts only
the page's ``data-live`` parts on screen. ``LiveFetchMiddleware`` keeps them
for the next real page view.
"""

from __future__ import annotations

from django.utils.deprecation import MiddlewareMixin

LIVE_HEADER = "X-Conductor-Live"


def is_live_fetch(request) -> bool:
    """Is ``request`` the live script's fetch rather than a page view?"""
    return request.headers.get(LIVE_HEADER) == "1"


class LiveFetchMiddleware(MiddlewareMixin):
    """Keep the messages a live fetch rendered. Listed after ``MessageMiddleware``, so its
    response step runs first and the message storage then sees them unread and keeps them.
    """

    def process_response(self, request, response):
        storage = getattr(request, "_messages", None)
        if storage is not None and is_live_fetch(request):
            storage.used = False
        return response
