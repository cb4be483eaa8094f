"""Who may reach the admin, walked over every admin URL the resolver knows (SPEC §7: staff login required).

The URLs are not listed by hand: every pattern under ``admin/`` (each
registered ModelAdmin's pages, the site's own, the overview and its pause
switch, the catch-all) is filled in with a row that exists, so that a page
added later is walked too.
"""

import logging
import re
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import ActionLocation
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from ingest.models import PluginClient, ToolPolicy
from conductor_site.asgi import application
from core.logfmt import OneLineRefusals
from tests.factories import (
    TEST_TOKEN,
    InstructionFactory,
    MessageFactory,
    PluginClientFactory,
    make_staff,
    make_task,
)

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"


def admin_routes() -> Iterator[str]:
    """Every route under ``admin/`` as the resolver has it, e.g. ``admin/ingest/pluginclient/<path:object_id>/``."""

    def walk(patterns, prefix):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith("admin/"):
                yield route

    yield from walk(get_resolver().url_patterns, "")


@pytest.fixture
def rows():
    """One row of each model the admin shows, keyed by ``app_label/model_name``."""
    instruction = InstructionFactory()
    made = [
        instruction, instruction.message, MessageFactory(), make_task(), PluginClientFactory(),
        ToolPolicy.objects.create(tool="echo", policy="allow"),
        Group.objects.create(name="operators"), User.objects.create_user("someone"),
    ]
    found = {f"{row._meta.app_label}/{row._meta.model_name}": row for row in made}
    found["conversations/conversation"] = instruction.message.conversation
    return found


def admin_urls(rows) -> list[str]:
    """Every admin route filled in: an existing row's id, each app of the app index, a path for the catch-all."""
    urls = []
    for route in admin_routes():
        if route.startswith("admin/^"):  # the app index: one URL per app it accepts
            apps = re.search(r"\(\?P<app_label>([^)]*)\)", route)[1].split("|")
            urls += [f"/admin/{app}/" for app in apps]
            continue
        if "(?P<url>" in route:  # the catch-all
            urls.append("/admin/no-such-page/")
            continue
        model = re.match(r"admin/(\w+/\w+)/", route)
        row = rows.get(model[1]) if model else None
        conversation = rows["conversations/conversation"]
        url = "/" + route
        url = url.replace("<path:content_type_id>", str(ContentType.objects.get_for_model(conversation).pk))
        url = re.sub(r"<(path:)?(object_id|id)>", str((row or conversation).pk), url)
        assert "<" not in url, url
        urls.append(url)
    return urls


def test_the_walk_covers_every_page_of_every_registered_model_admin(rows):
    urls = admin_urls(rows)
    assert "/admin/overview/" in urls and "/admin/overview/pause/" in urls
    for model in admin.site._registry:
        opts = model._meta
        for page in ("", "add/"):
            assert f"/admin/{opts.app_label}/{opts.model_name}/{page}" in urls


def where_it_ends(method, url, data) -> tuple[str, int]:
    """Where a request ends: the login it is sent to, or the page and status its redirects
    within the admin (the logout's to the index, a row's to its change page) lead to."""
    response = method(url, data)
    while response.status_code == 302 and not response["Location"].startswith(LOGIN):
        url = response["Location"]
        response = method.__self__.get(url)
    if response.status_code == 302:
        return LOGIN, 302
    return url, response.status_code


# The user who is not staff is a superuser: every permission, and still no admin.
@pytest.mark.parametrize("who", ["anonymous", "superuser but not staff"])
def test_no_admin_page_or_post_without_an_active_staff_login(client, rows, who):
    if who != "anonymous":
        user = User.objects.create_user("visitor", password="pw", is_superuser=True, is_staff=False)
        client.force_login(user)
    answered = {}
    for url in admin_urls(rows):
        if url == LOGIN:
            continue
        for method in (client.get, client.post):
            path, status = where_it_ends(method, url, {"action": "revoke", ACTION_CHECKBOX_NAME: [rows["ingest/pluginclient"].pk]})
            if path != LOGIN:
                answered[f"{method.__name__.upper()} {url}"] = (path, status)
    assert answered == {}
    assert PluginClient.objects.get().enabled


def all_permissions_of(*apps):
    return [f"{p.content_type.app_label}.{p.codename}" for p in Permission.objects.filter(
        content_type__app_label__in=apps).select_related("content_type")]


def test_staff_with_every_model_permission_reach_no_superuser_only_page(client, rows):
    # The pages that hand out or decide access (plugin tokens, tool policies).
    client.force_login(make_staff("staff", *all_permissions_of("ingest", "automation", "conversations")))
    superuser_only = ("/admin/ingest/pluginclient/", "/admin/ingest/toolpolicy/")
    urls = [url for url in admin_urls(rows) if url.startswith(superuser_only)]
    assert len(urls) == 13  # "Pair a browser" (pluginclient/pair/) among them
    answered = {}
    for url in urls:
        for method in (client.get, client.post):
            path, status = where_it_ends(method, url, {
                "action": "rotate", ACTION_CHECKBOX_NAME: [rows["ingest/pluginclient"].pk],
                "name": "mine", "tool": "shell.run", "policy": "allow",
            })
            if status not in (403, 404):
                answered[f"{method.__name__.upper()} {url}"] = (path, status)
    assert answered == {}
    client_row = PluginClient.objects.get()
    assert client_row.enabled and client_row.token_hash == rows["ingest/pluginclient"].token_hash
    assert list(ToolPolicy.objects.values_list("tool", "policy")) == [("echo", "allow")]
    assert not client.get("/admin/").content.decode().count("/admin/ingest/pluginclient/")


def test_a_permission_refusal_is_logged_as_one_structured_line(client, caplog):
    client.force_login(make_staff("viewer", password=None))
    caplog.set_level(logging.INFO)
    assert client.get("/admin/ingest/pluginclient/add/").status_code == 403
    (record,) = [record for record in caplog.records if record.name == "django.request"]
    # Formatted as the console handler formats it: one line, no traceback.
    (line,) = logging.Formatter("%(levelname)s %(name)s %(message)s").format(record).splitlines()
    assert line == (
        "WARNING django.request action=permission_denied status=403 method=GET "
        "path=/admin/ingest/pluginclient/add/ user=viewer reason=PermissionDenied"
    )
    assert record.fields["user"] == "viewer"


def test_a_server_error_keeps_its_traceback(caplog):
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal Server Error: %s",
                               ("/x",), (ValueError, ValueError("bug"), None))
    record.status_code = 500
    assert OneLineRefusals().filter(record) and record.exc_info and record.getMessage() == (
        "Internal Server Error: /x"
    )


def test_every_admin_post_without_a_csrf_token_is_refused(admin_user, rows):
    """Each action of each ModelAdmin, from its list and from a row's page, and every other admin POST."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(admin_user)
    posts = [(url, {"name": "x", "tool": "shell.run", "policy": "allow", "is_paused": "1"})
             for url in admin_urls(rows) if url != LOGIN]
    request = browser.get("/admin/").wsgi_request
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        row = rows.get(f"{opts.app_label}/{opts.model_name}")
        for name in model_admin.get_actions(request):
            posts.append((f"/admin/{opts.app_label}/{opts.model_name}/",
                          {"action": name, ACTION_CHECKBOX_NAME: [row.pk if row else 1], "index": 0}))
        if row is not None:
            for name in model_admin.get_actions(request, action_location=ActionLocation.CHANGE_FORM):
                posts.append((f"/admin/{opts.app_label}/{opts.model_name}/{row.pk}/change/",
                              {f"{ActionLocation.CHANGE_FORM.value}-action": name, ACTION_CHECKBOX_NAME: [row.pk]}))
    actions = [data["action"] for _, data in posts if "action" in data]
    assert {"revoke", "rotate", "retry", "cancel", "approve", "reject", "pause", "resume"} <= set(actions)
    answered = {}
    for url, data in posts:
        response = browser.post(url, data)
        if response.status_code != 403:
            answered[f"{url} {data}"] = response.status_code
    assert answered == {}
    client_row = PluginClient.objects.get()
    assert client_row.enabled and client_row.token_hash == rows["ingest/pluginclient"].token_hash


# --- a plugin's token: never in a log line, never on an admin page --------------------------------


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_token_is_in_no_log_line_and_on_no_admin_page(admin_client, rows, caplog, channel_layer):
    wrong = "wrong-token-" + "w" * 32
    client = rows["ingest/pluginclient"]
    hellos = [
        ({"client_id": client.client_id, "token": TEST_TOKEN, "plugin_version": "1.0.0",
          "capabilities": ["proxy_delivery", "dom_delivery"], "adapters": {"claude": "2026-11-29"}}, "hello.ok"),
        ({"client_id": client.client_id, "token": wrong}, "unauthorized"),
        ({"client_id": "nobody", "token": TEST_TOKEN}, "unauthorized"),
        ({"client_id": client.client_id, "token": TEST_TOKEN, "capabilities": "all"}, "unauthorized"),
        ({"client_id": TEST_TOKEN, "token": wrong}, "unauthorized"),  # pasted into the wrong field
    ]

    async def say_hellos():
        for fields, answer in hellos:
            communicator = WebsocketCommunicator(application, "/ws/plugin/")
            assert (await communicator.connect())[0]
            await communicator.send_json_to({"type": "hello", **fields})
            reply = await communicator.receive_json_from()
            assert reply.get("code", reply["type"]) == answer, reply
            await communicator.disconnect()

    caplog.set_level(logging.DEBUG)
    async_to_sync(say_hellos)()

    logged = caplog.text + "".join(str(record.__dict__) for record in caplog.records)
    assert "hello_refused" in logged  # the refusals were logged, without what was refused
    assert TEST_TOKEN not in logged and wrong not in logged
    # The pages that show rows: the index, the overview, each list and each row's page.
    shown = [url for url in admin_urls(rows) if re.fullmatch(r"/admin/(overview/|\w+/\w+/(\w+/change/)?)?", url)]
    pages = {url: admin_client.get(url) for url in shown}
    assert {url: page.status_code for url, page in pages.items() if page.status_code >= 500} == {}
    assert "2026-11-29" in pages[f"/admin/ingest/pluginclient/{client.pk}/change/"].content.decode()
    assert [url for url, page in pages.items() if TEST_TOKEN in page.content.decode()] == []
