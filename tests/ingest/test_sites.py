"""Chat sites described as data, from the server's side (SPEC §9, "Platforms as data")."""

import copy
import html
import json
import shutil
import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from conductor_site.asgi import application
from conversations.models import Conversation
from ingest.models import PluginClient, SiteDescription
from ingest.sites.services import SiteNameMismatch, SiteOriginTaken, site_description_delete, site_description_save
from ingest.sites.selectors import (
    builtin_adapter_origins,
    platform_adapter,
    platform_names_in_force,
    sites_in_force,
    sites_left_out,
    sites_version,
)
from platforms import platforms
from platforms.registry import UnsupportedPlatform
from platforms.sites import SCHEMA_PATH, InvalidSiteDescription, shipped_site_descriptions
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.procs import started_in_processes

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

SHIPPED = ("aistudio", "copilot", "deepseek", "grok", "kimi", "mistral", "openrouter", "perplexity", "qwen", "t3chat", "zai")


def perplexity(**changes):
    return shipped_with("perplexity", **changes)


def grok(**changes):
    return shipped_with("grok", **changes)


def shipped_with(site, /, **changes):
    description = copy.deepcopy(shipped_site_descriptions()[site])
    for path, value in changes.items():
        group, _, key = path.partition("__")
        if key:
            description[group][key] = value
        else:
            description[group] = value
    return description


def a_new_site():
    description = perplexity(name="poe", title="Poe", origins=["https://poe.com"])
    description["conversation"]["path_prefixes"] = ["/chat/"]
    return description


async def hello(client_id="laptop", **fields):
    communicator = WebsocketCommunicator(application, "/ws/plugin/")
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({
        "type": "hello", "client_id": client_id, "token": TEST_TOKEN, "plugin_version": "1.0.0",
        "platforms": ["claude"], "capabilities": ["dom_delivery"], **fields,
    })
    communicator.hello_ok = await communicator.receive_json_from()
    assert communicator.hello_ok["type"] == "hello.ok"
    return communicator


def test_every_shipped_description_validates_and_is_in_force():
    assert sorted(shipped_site_descriptions()) == list(SHIPPED)
    assert [site["name"] for site in sites_in_force()] == list(SHIPPED)


@pytest.mark.parametrize("change,what", [
    ({"answer__streaming": ["<script>alert(1)</script>"]}, "answer/streaming"),
    ({"answer__streaming": ["button[onclick]"]}, "answer/streaming"),
    ({"answer__text": ["div[style*='url(https://evil.test/x)']"]}, "answer/text"),
    ({"composer__input": ["div" * 101]}, "composer/input"),
    ({"answer__run": "fetch('https://evil.test')"}, "answer"),
    ({"script": "alert(1)"}, "(top)"),
    ({"origins": ["http://perplexity.ai"]}, "origins"),
    ({"name": "claude"}, "name"),
    ({"answer__code": {"block": ["pre"], "language": {"attribute": "data-lang", "header": [".h"]}}}, "answer/code/language"),
    ({"answer__code": {"block": ["pre"], "lines": ["<b>"]}}, "answer/code/lines"),
    ({"answer__code": {"lines": [".line"]}}, "answer/code"),
])
def test_a_description_with_a_script_a_url_an_unknown_key_or_an_over_long_selector_is_refused(change, what):
    with pytest.raises(InvalidSiteDescription) as raised:
        site_description_save(name=change.get("name", "perplexity"), description=perplexity(**change), actor="ops")
    assert what in str(raised.value)
    assert not SiteDescription.objects.exists()


def test_a_code_block_rule_is_saved_as_the_plugins_validator_reads_it():
    code = {"block": ["pre.qwen-markdown-code"], "language": {"header": [".qwen-markdown-code-header > div:first-child"]},
            "lines": [".view-lines .view-line"], "skip": [".qwen-markdown-code-header"]}
    site_description_save(name="perplexity", description=perplexity(answer__code=code), actor="ops")
    assert SiteDescription.objects.get(name="perplexity").description["answer"]["code"] == code


def test_a_description_saved_under_another_name_is_refused():
    with pytest.raises(SiteNameMismatch):
        site_description_save(name="grok", description=perplexity(), actor="ops")
    assert not SiteDescription.objects.exists()


@pytest.fixture
def laptop(channel_layer):
    return PluginClientFactory(client_id="laptop", capabilities=["dom_delivery"])


async def test_hello_ok_names_the_sites_version_and_sites_get_hands_out_the_sites_in_force(laptop):
    plugin = await hello()
    version = plugin.hello_ok["sites_version"]
    await plugin.send_json_to({"type": "sites.get", "id": "s-1"})
    sites = await plugin.receive_json_from()
    assert (sites["type"], sites["id"], sites["sites_version"]) == ("sites", "s-1", version)
    assert [site["name"] for site in sites["sites"]] == list(SHIPPED)
    await plugin.send_json_to({"type": "sites.get", "id": 7})
    assert (await plugin.receive_json_from())["code"] == "invalid"
    await plugin.disconnect()

    await database_sync_to_async(site_description_save)(
        name="perplexity", description=perplexity(answer__streaming=["div.answer-is-streaming"]), actor="ops"
    )
    plugin = await hello()
    assert plugin.hello_ok["sites_version"] != version
    await plugin.send_json_to({"type": "sites.get"})
    sites = {site["name"]: site for site in (await plugin.receive_json_from())["sites"]}
    assert sites["perplexity"]["answer"]["streaming"] == ["div.answer-is-streaming"]
    assert sites["grok"] == shipped_site_descriptions()["grok"]
    await plugin.disconnect()


async def test_a_plugin_may_send_a_final_message_of_a_site_an_operator_added_until_it_is_deleted(laptop):
    plugin = await hello()  # connected before the site was added: no read of the sites made it a platform
    await database_sync_to_async(site_description_save)(name="poe", description=a_new_site(), actor="ops")
    assert (await plugin.receive_json_from(timeout=5))["type"] == "sites"
    frame = {
        "type": "browser.final_message", "id": "f-1", "platform": "poe", "conversation_id": "abcdef123",
        "message_id": "", "text": "hello", "page_url": "https://poe.com/chat/abcdef123",
    }
    await plugin.send_json_to(frame)
    assert (await plugin.receive_json_from())["type"] == "ack"
    assert await Conversation.objects.filter(platform="poe", remote_id="abcdef123").aexists()
    assert "poe" not in platforms  # the process-wide registry holds what ships, nothing read

    assert await database_sync_to_async(site_description_delete)(name="poe", actor="ops")
    assert (await plugin.receive_json_from(timeout=5))["type"] == "sites"
    await plugin.send_json_to({**frame, "id": "f-2", "message_id": "m-2"})
    refused = await plugin.receive_json_from()
    assert (refused["type"], refused["code"]) == ("error", "invalid") and "unknown platform 'poe'" in refused["detail"]
    await plugin.disconnect()


async def test_a_hello_keeps_the_adapter_version_of_a_site_an_operator_added_and_drops_an_unknown_one(laptop):
    await database_sync_to_async(site_description_save)(name="poe", description=a_new_site(), actor="ops")
    plugin = await hello(platforms=["claude", "poe", "elsewhere"],
                         adapters={"claude": "2026-11-29", "poe": "site-1", "elsewhere": "x"})
    await plugin.disconnect()
    client = await PluginClient.objects.aget(pk=laptop.pk)
    assert client.adapters == {"claude": "2026-11-29", "poe": "site-1"}


def test_an_operator_edits_a_copy_of_a_shipped_site_in_the_admin_and_the_log_says_what_changed(admin_client):
    page = admin_client.get("/admin/ingest/sitedescription/")
    assert page.status_code == 200 and b"Edit a copy" in page.content and b"Perplexity" in page.content
    form = admin_client.get("/admin/ingest/sitedescription/add/?name=perplexity")
    assert form.status_code == 200 and b"Stop generating response" in form.content
    changed = perplexity(answer__streaming=["div.answer-is-streaming"])
    saved = admin_client.post("/admin/ingest/sitedescription/add/",
                              {"name": "perplexity", "description": json.dumps(changed)})
    assert saved.status_code == 302, saved.content[:2000]
    site = SiteDescription.objects.get()
    assert (site.revision, site.updated_by, site.description) == (1, "admin", changed)
    assert LogEntry.objects.get().change_message == "Added answer/streaming (revision 1)"

    refused = admin_client.post(f"/admin/ingest/sitedescription/{site.pk}/change/",
                                {"description": json.dumps(perplexity(answer__streaming=["<img src=x>"]))})
    assert refused.status_code == 200 and b"Not a valid site description: answer/streaming/0" in refused.content
    broken = admin_client.post(f"/admin/ingest/sitedescription/{site.pk}/change/", {"description": "{not json"})
    assert broken.status_code == 200
    assert SiteDescription.objects.get().revision == 1

    again = perplexity(composer__input=["#ask-input"], answer__streaming=["div.answer-is-streaming"])
    assert admin_client.post(f"/admin/ingest/sitedescription/{site.pk}/change/",
                             {"description": json.dumps(again)}).status_code == 302
    assert SiteDescription.objects.get().revision == 2
    assert LogEntry.objects.order_by("-pk").first().change_message == "Changed composer/input (revision 2)"


def test_edit_a_copy_saved_unchanged_stores_the_shipped_description(admin_client):
    form = admin_client.get("/admin/ingest/sitedescription/add/?name=grok")
    assert form.status_code == 200
    text = html.unescape(form.content.decode().split('name="description"', 1)[1].split(">", 1)[1].split("</textarea>")[0])
    assert json.loads(text) == shipped_site_descriptions()["grok"]  # the description, encoded once
    saved = admin_client.post("/admin/ingest/sitedescription/add/?name=grok", {"name": "grok", "description": text})
    assert saved.status_code == 302, saved.content[:2000]
    assert SiteDescription.objects.get(name="grok").description == shipped_site_descriptions()["grok"]
    assert LogEntry.objects.get().change_message == "Added nothing (revision 1)"
    change = admin_client.get(f"/admin/ingest/sitedescription/{SiteDescription.objects.get().pk}/change/")
    assert b"&quot;name&quot;: &quot;grok&quot;" in change.content  # the row's description, indented, once


def test_a_saved_description_changes_the_version_and_replaces_the_shipped_copy():
    before = sites_version()
    assert sites_version() == before  # nothing changed: the same name
    site = site_description_save(
        name="perplexity", description=perplexity(answer__streaming=["div.answer-is-streaming"]), actor="ops"
    )
    assert site.revision == 1
    after = sites_version()
    assert after != before
    in_force = {description["name"]: description for description in sites_in_force()}
    assert in_force["perplexity"]["answer"]["streaming"] == ["div.answer-is-streaming"]
    assert site_description_save(name="perplexity", description=perplexity(), actor="ops").revision == 2
    assert sites_version() not in (before, after)
    SiteDescription.objects.all().delete()
    assert sites_version() == before  # the shipped copy is back in force


def test_a_site_an_operator_adds_is_a_platform_while_its_row_is_in_force_with_its_edits():
    with pytest.raises(UnsupportedPlatform):
        platform_adapter("poe")
    site_description_save(name="poe", description=a_new_site(), actor="ops")
    assert (platform_adapter("poe").label, platform_adapter("poe").performs) == ("Poe", ("dom",))
    assert "poe" in platform_names_in_force() and "poe" not in platforms
    site_description_save(name="poe", description={**a_new_site(), "title": "Poe (mine)"}, actor="ops")
    assert platform_adapter("poe").label == "Poe (mine)"
    site_description_save(name="grok", description=grok(title="Grok (mine)"), actor="ops")
    assert platform_adapter("grok").label == "Grok (mine)"  # an edited shipped site too
    site_description_delete(name="grok", actor="ops")
    assert platform_adapter("grok").label == "Grok"
    site_description_delete(name="poe", actor="ops")
    assert "poe" not in platform_names_in_force()
    with pytest.raises(UnsupportedPlatform):
        platform_adapter("poe")


def test_two_processes_accept_a_site_an_operator_added_right_after_its_save_and_neither_after_its_delete(tmp_path):
    steps = ["before", "saved", "edited", "deleted"]

    def step(name: str) -> None:
        (tmp_path / name).touch()
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob(f"{name}.*"))) < 2:
            assert time.monotonic() < deadline, f"the processes did not pass {name}"
            time.sleep(0.02)

    with started_in_processes("tests.ingest.workers:platform_seen_at_each_step", [(str(tmp_path), steps)] * 2) as seen:
        step("before")
        site_description_save(name="poe", description=a_new_site(), actor="ops")
        step("saved")
        site_description_save(name="poe", description={**a_new_site(), "title": "Poe (mine)"}, actor="ops")
        step("edited")
        site_description_delete(name="poe", actor="ops")
        step("deleted")
        results = [pending.get(timeout=60) for pending in seen]
    expected = [(False, None), (True, "Poe"), (True, "Poe (mine)"), (False, None)]
    assert [[tuple(each) for each in result] for result in results] == [expected, expected]


async def test_a_connected_plugin_is_sent_the_sites_in_force_when_an_operator_saves_or_removes_one(laptop):
    plugin = await hello()
    version = plugin.hello_ok["sites_version"]
    await database_sync_to_async(site_description_save)(
        name="grok", description=grok(answer__streaming=["div.grok-is-writing"]), actor="ops"
    )
    sent = await plugin.receive_json_from(timeout=5)
    assert (sent["type"], sent["id"]) == ("sites", None) and sent["sites_version"] != version
    assert {site["name"]: site for site in sent["sites"]}["grok"]["answer"]["streaming"] == ["div.grok-is-writing"]

    assert await database_sync_to_async(site_description_delete)(name="grok", actor="ops")
    sent = await plugin.receive_json_from(timeout=5)
    assert sent["sites_version"] == version  # the shipped copy is in force again
    assert {site["name"]: site for site in sent["sites"]}["grok"] == shipped_site_descriptions()["grok"]
    await plugin.disconnect()


def test_removing_an_operators_copy_in_the_admin_puts_the_shipped_one_back(admin_client):
    site = site_description_save(name="perplexity", description=perplexity(title="Perplexity (mine)"), actor="ops")
    changed = sites_version()
    removed = admin_client.post(f"/admin/ingest/sitedescription/{site.pk}/delete/", {"post": "yes"})
    assert removed.status_code == 302
    assert not SiteDescription.objects.exists()
    assert sites_version() != changed
    assert {d["name"]: d for d in sites_in_force()}["perplexity"] == shipped_site_descriptions()["perplexity"]


# ---- an origin belongs to one site ------------------------------------------------------------


def on_origin(name, *origins, title="Reader"):
    """A new site of that name on those origins, from a shipped one."""
    description = a_new_site()
    description.update(name=name, title=title, origins=list(origins))
    return description


def test_the_schema_keeps_the_adapters_origins_out_and_the_shipped_sites_on_origins_of_their_own():
    schema = json.loads(SCHEMA_PATH.read_text())
    assert sorted(schema["$defs"]["origin"]["not"]["enum"]) == sorted(builtin_adapter_origins())
    assert builtin_adapter_origins()["https://claude.ai"] == "claude"
    origins = [origin for description in shipped_site_descriptions().values() for origin in description["origins"]]
    assert len(origins) == len(set(origins))
    assert not set(origins) & set(builtin_adapter_origins())


def test_two_shipped_files_on_one_origin_stop_the_start(tmp_path, monkeypatch):
    import platforms.sites as sites_module

    shutil.copy(SCHEMA_PATH, tmp_path / "schema.json")
    (tmp_path / "grok.json").write_text(json.dumps(grok()))
    (tmp_path / "grok_twin.json").write_text(json.dumps(grok(name="grok_twin")))
    monkeypatch.setattr(sites_module, "SITES_DIR", tmp_path)
    monkeypatch.setattr(sites_module, "SCHEMA_PATH", tmp_path / "schema.json")
    shipped_site_descriptions.cache_clear()
    try:
        with pytest.raises(InvalidSiteDescription, match="https://grok.com is claimed by both 'grok' and 'grok_twin'"):
            shipped_site_descriptions()
    finally:
        monkeypatch.undo()
        shipped_site_descriptions.cache_clear()
        assert sorted(shipped_site_descriptions()) == list(SHIPPED)


@pytest.mark.parametrize("origin", ["https://claude.ai", "https://chatgpt.com", "https://gemini.google.com"])
def test_a_description_cannot_claim_an_origin_of_the_adapters_with_network_capture(origin):
    with pytest.raises(InvalidSiteDescription, match="origins/1"):
        site_description_save(name="perplexity", description=perplexity(origins=["https://perplexity.ai", origin]),
                              actor="ops")
    assert not SiteDescription.objects.exists()


def test_a_description_cannot_claim_a_shipped_sites_or_an_operators_sites_origin():
    with pytest.raises(SiteOriginTaken) as raised:
        site_description_save(name="gh_reader", description=on_origin("gh_reader", "https://github.com"), actor="ops")
    assert "https://github.com already belongs to the site 'copilot' (GitHub Copilot, shipped with Conductor)" in str(
        raised.value)
    # A shipped site's copy may not take another shipped site's origin either.
    with pytest.raises(SiteOriginTaken, match="'deepseek'"):
        site_description_save(name="grok", description=grok(origins=["https://grok.com", "https://chat.deepseek.com"]),
                              actor="ops")
    assert not SiteDescription.objects.exists()

    site_description_save(name="poe", description=a_new_site(), actor="ops")
    with pytest.raises(SiteOriginTaken) as raised:
        site_description_save(name="reader_two", description=on_origin("reader_two", "https://poe.com"), actor="ops")
    assert "the site 'poe' (Poe, an operator's description)" in str(raised.value)
    assert list(SiteDescription.objects.values_list("name", flat=True)) == ["poe"]
    # Its own origins, saved again: this one replaces itself.
    assert site_description_save(name="poe", description=a_new_site(), actor="ops").revision == 2


def test_an_origin_a_site_gave_up_may_go_to_another():
    site_description_save(name="copilot", description=shipped_with("copilot", origins=["https://copilot.acme.test"]),
                          actor="ops")
    site_description_save(name="gh_reader", description=on_origin("gh_reader", "https://github.com"), actor="ops")
    in_force = {site["name"]: site["origins"] for site in sites_in_force()}
    assert (in_force["copilot"], in_force["gh_reader"]) == (["https://copilot.acme.test"], ["https://github.com"])
    assert sites_left_out() == {}


def test_the_sites_in_force_leave_out_both_operators_descriptions_that_raced_onto_one_origin():
    # Two saves that passed the check at the same moment: both rows are there.
    for name in ("gh_reader", "reader_two"):
        SiteDescription.objects.create(name=name, description=on_origin(name, "https://reader.acme.test"),
                                       updated_at=timezone.now(), updated_by="ops")
    names = [site["name"] for site in sites_in_force()]
    assert names == list(SHIPPED)
    assert sites_left_out() == {"gh_reader": "https://reader.acme.test is claimed by reader_two too",
                                "reader_two": "https://reader.acme.test is claimed by gh_reader too"}


def test_removing_a_copy_that_gave_up_an_origin_leaves_out_the_site_that_took_it(admin_client):
    moved = site_description_save(
        name="copilot", description=shipped_with("copilot", origins=["https://copilot.acme.test"]), actor="ops")
    site_description_save(name="gh_reader", description=on_origin("gh_reader", "https://github.com"), actor="ops")
    assert admin_client.post(f"/admin/ingest/sitedescription/{moved.pk}/delete/", {"post": "yes"}).status_code == 302
    in_force = {site["name"]: site for site in sites_in_force()}
    assert in_force["copilot"] == shipped_site_descriptions()["copilot"]
    assert "gh_reader" not in in_force
    listed = html.unescape(admin_client.get("/admin/ingest/sitedescription/").content.decode())
    assert "no: https://github.com is claimed by copilot too" in listed


def test_the_admin_refuses_a_description_on_another_sites_origin_and_names_that_site(admin_client):
    taken = admin_client.post("/admin/ingest/sitedescription/add/",
                              {"name": "gh_reader", "description": json.dumps(on_origin("gh_reader", "https://github.com"))})
    assert taken.status_code == 200
    page = html.unescape(taken.content.decode())
    assert ("https://github.com already belongs to the site 'copilot' (GitHub Copilot, shipped with Conductor): "
            "an origin belongs to one site.") in page
    builtin = admin_client.post("/admin/ingest/sitedescription/add/",
                                {"name": "gh_reader", "description": json.dumps(on_origin("gh_reader", "https://claude.ai"))})
    page = html.unescape(builtin.content.decode())
    assert builtin.status_code == 200
    assert "https://claude.ai is the built-in Claude adapter's: a site description cannot claim it." in page
    assert "should not be valid under" not in page
    assert not SiteDescription.objects.exists()

    # A row's change form: the row's own origins are its own; another's are not.
    site = site_description_save(name="poe", description=a_new_site(), actor="ops")
    assert admin_client.post(f"/admin/ingest/sitedescription/{site.pk}/change/",
                             {"description": json.dumps(a_new_site())}).status_code == 302
    onto_grok = a_new_site()
    onto_grok["origins"] = ["https://poe.com", "https://grok.com"]
    refused = admin_client.post(f"/admin/ingest/sitedescription/{site.pk}/change/", {"description": json.dumps(onto_grok)})
    assert refused.status_code == 200 and "the site 'grok' (Grok, shipped with Conductor)" in html.unescape(
        refused.content.decode())
    assert SiteDescription.objects.get().revision == 2
