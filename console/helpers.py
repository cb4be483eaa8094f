"""What the admin modules share: showing stored values, links, and the admin's own pieces.

Showing is pure. A chat page, a plugin or a tool wrote these values, so none
of them is trusted: a URL becomes a link only when following it is safe, and
text is made encodable before it reaches a response. The admin's own pieces
are where an action is offered, the superuser-only permissions and the log.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import re
from typing import Any
from urllib.parse import urlsplit

from django.contrib.admin import ActionLocation
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import Model
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from core import clock

# --- stored URLs, text and JSON ----------------------------------------------------------

# Any ASCII control character or space. Browsers drop some of them inside a URL
# ("java\tscript:" runs as "javascript:"), so a URL holding one is never a link.
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def safe_link_url(url: str | None) -> str | None:
    """``url`` when it may become a link's href, else None.

    Safe means https to any host, or http to a loopback host (a local
    development page). Every other scheme (javascript:, data:, vbscript:,
    file:, ...), a URL without a host, and a URL holding control characters or
    spaces is refused: the caller shows it as text instead.
    """
    if not url or _CONTROL_OR_SPACE.search(url):
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # e.g. an unbalanced "[" in the host
        return None
    if not host:
        return None
    scheme = parts.scheme.lower()
    if scheme == "https" or (scheme == "http" and _is_loopback(host)):
        return url
    return None


def link_or_text(url: str) -> SafeString:
    """``url`` as a link when ``safe_link_url`` allows it, else as escaped text."""
    href = safe_link_url(url)
    if href is None:
        return format_html('<span class="unsafe-url" title="not a link: unsafe scheme">{}</span>',
                           displayable_text(url))
    return format_html('<a href="{}" rel="noreferrer noopener">{}</a>', href, displayable_text(url))


def displayable_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so that it encodes as UTF-8.

    A lone surrogate (a JSON "\\ud800" escape, decoded) is a valid Python
    string but cannot be encoded, and one in a page turns the whole response
    into a server error. A high and low surrogate in a row are joined into the
    character they stand for.
    """
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def readable_json(value: Any, *, sort_keys: bool = False) -> str:
    """A JSON value as indented text, non-ASCII characters shown as themselves."""
    return displayable_text(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=sort_keys))


def readable_json_text(text: str) -> str:
    """Stored JSON text, indented with its keys sorted; text that is not JSON, as it is."""
    try:
        return readable_json(json.loads(text), sort_keys=True)
    except ValueError:
        return displayable_text(text)


# --- pages of a ModelAdmin -----------------------------------------------------------------


def admin_pages(model_admin, pages: list[tuple[str, Any, str]]) -> list[URLPattern]:
    """A ModelAdmin's own pages, put before its usual ones by its ``get_urls``.

    ``pages``: (route, view, name suffix); each view is wrapped in the admin
    site's ``admin_view`` (a staff login, never cached) and named
    ``<app>_<model>_<suffix>``, so ``reverse("admin:<app>_<model>_<suffix>")`` finds it.
    """
    opts = model_admin.model._meta
    return [
        path(route, model_admin.admin_site.admin_view(view), name=f"{opts.app_label}_{opts.model_name}_{suffix}")
        for route, view, suffix in pages
    ]


# --- times -------------------------------------------------------------------------------


def datetime_from_ms(ms: int | None) -> dt.datetime | None:
    """An aware datetime for epoch milliseconds (the tasks' time fields), in the site's time zone."""
    return None if ms is None else timezone.localtime(clock.datetime_from_ms(ms))


def format_ms(ms: int | None) -> str:
    """Epoch milliseconds as a readable time to the millisecond, e.g. ``2026-11-29 12:00:00.250 UTC``."""
    moment = datetime_from_ms(ms)
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d} {moment:%Z}"


def relative_age(ms: int | None, *, now: int | None = None) -> str:
    """How long ago epoch milliseconds ``ms`` was, in its largest unit: ``12 s ago``, ``3 min ago``, ``2 h ago``."""
    if ms is None:
        return "-"
    seconds = max(0, ((clock.now_ms() if now is None else now) - ms) // 1000)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def delivery_answer(row: dict) -> str:
    """How the plugin answered one delivery request, in a few words.

    ``row``: a ``DeliveryRequest`` as ``values()`` reads it, with ``answered_at``, ``delivered`` and the
    answer's ``result__ok``, ``result__status``, ``result__error`` and ``result__error_code``.
    """
    if row["answered_at"] is None:
        return "no answer (yet)"
    if row["delivered"]:
        return f"delivered ({format_ms(row['answered_at'])})"
    parts = [row["result__error_code"] or ("ok" if row["result__ok"] else "failed")]
    if row["result__status"] is not None:
        parts.append(f"HTTP {row['result__status']}")
    if row["result__error"]:
        parts.append(str(row["result__error"])[:200])
    return ": ".join(parts)


# --- blocks of stored text ---------------------------------------------------------------

# Every JSON block carries it, so that a page's JSON can be told from its text.
JSON_CLASS = "conductor-json"


def text_block(text: str, *, css_class: str | None = None, in_table: bool = False) -> SafeString:
    """``text`` in a <pre> that keeps its lines and wraps long ones; escaped, and made encodable.

    ``in_table`` drops the <pre>'s margin, for a block inside an inline's table cell.
    """
    # Classes, not a style attribute: the admin's Content-Security-Policy refuses those (console.css).
    classes = " ".join([*([css_class] if css_class else []), "conductor-text", *(["in-table"] if in_table else [])])
    return format_html('<pre class="{}">{}</pre>', classes, displayable_text(text))


def json_block(value: Any, *, sort_keys: bool = False, in_table: bool = False) -> SafeString | str:
    """A JSON value, indented, in a ``text_block``; "-" for None (nothing stored)."""
    if value is None:
        return "-"
    return text_block(readable_json(value, sort_keys=sort_keys), css_class=JSON_CLASS, in_table=in_table)


def json_text_block(text: str | None) -> SafeString | str:
    """Stored JSON text as ``readable_json_text`` shows it, in a ``text_block``; "-" for None."""
    if text is None:
        return "-"
    return text_block(readable_json_text(text), css_class=JSON_CLASS)


# --- links to admin pages ----------------------------------------------------------------


def admin_change_url(obj: Model | type[Model], *, pk: Any = None) -> str:
    """The admin page of ``obj``; given a model and ``pk``, of that row (when only its id is at hand)."""
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk if pk is None else pk])


def admin_link(obj: Model | None, text: Any = None) -> str:
    """A link to ``obj``'s admin page, reading ``text`` (``obj`` itself by default); "-" without an object."""
    if obj is None:
        return "-"
    return format_html('<a href="{}">{}</a>', admin_change_url(obj), obj if text is None else text)


def list_return_url(request, opts) -> str:
    """Where an action's confirmation page posts back: the list as the operator had it
    (its filters and search) when the action came from the list, else the bare list.

    As with Django's own delete confirmation, the action then runs on the ticked
    rows the filtered list still holds.
    """
    changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    return request.get_full_path() if request.path == changelist else changelist


# --- the admin's own pieces --------------------------------------------------------------

# Where an action is offered: on the list, and on each row's own page.
EVERYWHERE = [ActionLocation.CHANGE_LIST, ActionLocation.CHANGE_FORM]


class SuperuserOnlyMixin:
    """Mix into a ``ModelAdmin`` whose rows only active superusers may see, add, change or delete.

    For rows that hand out or decide access (plugin tokens, tool policies),
    which a model permission granted to staff must not open.
    """

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    has_add_permission = has_change_permission = has_delete_permission = has_view_permission


def log_change(request, objects, message: str) -> None:
    """One admin log entry per object in ``objects``, saying ``message``, by the acting operator."""
    if objects:
        LogEntry.objects.log_actions(
            user_id=request.user.pk, queryset=objects, action_flag=CHANGE, change_message=message
        )


def awaiting_approval_text(count: int) -> str:
    """The message for retried tasks that went back to ``blocked``: they never had the approval they need."""
    return (
        f"{count} of them never had the approval they need: they wait for approval again (blocked), "
        "and run only once someone approves them."
    )


def refused_text(refused: dict[str, str], *, limit: int = 20) -> str:
    """The message for tasks an operator service refused for a missing permission: each reason, then its ids."""
    by_reason: dict[str, list[str]] = {}
    for task_id, why in refused.items():
        by_reason.setdefault(why, []).append(task_id)
    reasons = "; ".join(
        f"{why}: {', '.join(ids[:limit])}" + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
        for why, ids in by_reason.items()
    )
    return f"Refused {len(refused)} task(s), left as they were ({reasons})"
