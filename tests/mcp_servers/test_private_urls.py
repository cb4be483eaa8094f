"""Streamable HTTP MCP servers on loopback, link-local and private addresses are refused unless allowed."""

import json

import pytest
from django.core.exceptions import ValidationError

from mcp_servers.models import McpServer
from mcp_servers.services import ServersFileError, mcp_server_refresh, mcp_servers_file_read
from tests.mcp_servers.conftest import own_http_server
from tests.mcp_servers.test_admin import add_server
from tools import mcp_http
from tools.mcp_addresses import addresses_refusal, url_refusal

pytestmark = pytest.mark.django_db

REFUSED = [
    "http://127.0.0.1:8000/mcp", "http://127.1/mcp", "http://2130706433/mcp", "http://0x7f.0.0.1/mcp",
    "http://[::1]:8000/mcp", "http://localhost:8000/mcp", "http://LOCALHOST./mcp", "http://api.localhost/mcp",
    "http://169.254.169.254/latest/meta-data", "http://[fe80::1]/mcp", "http://10.1.2.3/mcp",
    "http://172.16.0.1/mcp", "http://192.168.1.10/mcp", "http://[fc00::1]/mcp", "http://[fd12:3456::1]/mcp",
    "http://[::ffff:127.0.0.1]/mcp", "http://0.0.0.0/mcp", "http://100.64.0.1/mcp",
    # NAT64 (well-known prefix: what it carries; local-use prefix: whole), IPv4-compatible, 6to4.
    "http://[64:ff9b::7f00:1]/mcp", "http://[64:ff9b::127.0.0.1]/mcp", "http://[64:ff9b::a9fe:a9fe]/mcp",
    "http://[64:ff9b:1::7f00:1]/mcp", "http://[64:ff9b:1::808:808]/mcp", "http://[::7f00:1]/mcp",
    "http://[::ffff:a00:1]/mcp", "http://[2002:7f00:1::]/mcp", "http://[2002:c0a8:101::1]/mcp",
    # Scoped IPv6, with an interface this machine has or not; a zone on an IPv4 literal.
    "http://[fe80::1%25eth0]/mcp", "http://[fe80::1%25lo]:8000/mcp", "http://[fe80::1%25nosuchif9]/mcp",
    "http://127.0.0.1%2509/mcp",
    # IPv4 in decimal, octal and hex, whole or in parts.
    "http://017700000001/mcp", "http://0177.0.0.1/mcp", "http://0x7f000001/mcp", "http://0xa9.0xfe.0xa9.0xfe/",
    "http://3232235777/mcp",
]


@pytest.mark.parametrize("url", REFUSED)
def test_a_url_to_a_loopback_link_local_or_private_address_is_refused(url):
    assert "CONDUCTOR_MCP_ALLOW_PRIVATE_URLS" in url_refusal(url)


@pytest.mark.parametrize("url", [
    "https://mcp.example.com/mcp", "https://8.8.8.8/mcp", "http://[2001:4860::8888]/",
    "http://[64:ff9b::808:808]/mcp", "http://[2002:808:808::1]/mcp",  # they carry a global IPv4 address
])
def test_a_url_to_a_name_or_a_global_address_may_be_tried(url):
    assert url_refusal(url) == ""


def test_the_admin_form_refuses_a_loopback_url_unless_the_setting_allows_it(admin_client, settings):
    response = add_server(admin_client, name="web", transport="http", url="http://127.0.0.1:9/mcp", command="")
    assert "127.0.0.1 is a loopback address" in str(response.context["adminform"].form.errors["url"])
    assert not McpServer.objects.exists()

    settings.CONDUCTOR_MCP_ALLOW_PRIVATE_URLS = True
    add_server(admin_client, name="web", transport="http", url="http://127.0.0.1:9/mcp", command="")
    assert McpServer.objects.filter(name="web").exists()


@pytest.mark.parametrize("url", ["http://[64:ff9b::7f00:1]/mcp", "http://[fe80::1%25eth0]/mcp"])
def test_the_admin_form_and_the_model_refuse_nat64_and_scoped_forms_of_inward_addresses(admin_client, url):
    response = add_server(admin_client, name="web", transport="http", url=url, command="")
    assert response.context["adminform"].form.errors["url"]
    assert not McpServer.objects.filter(name="web").exists()
    server = McpServer(name="web", transport=McpServer.Transport.HTTP, url=url)
    with pytest.raises(ValidationError, match="CONDUCTOR_MCP_ALLOW_PRIVATE_URLS"):
        server.clean()


@pytest.mark.parametrize("address,kind", [
    ("64:ff9b::7f00:1", "loopback"), ("64:ff9b:1::1", "private"), ("::7f00:1", "loopback"),
    ("fe80::1%eth0", "link-local"), ("2002:a9fe:a9fe::", "link-local"),
])
def test_a_name_resolving_to_an_inward_address_in_any_ipv6_form_is_refused_at_the_connection(address, kind):
    assert f"is a {kind} address" in addresses_refusal("mcp.example.test", ["93.184.215.14", address])


def test_the_model_refuses_a_link_local_url():
    server = McpServer(name="meta", transport=McpServer.Transport.HTTP, url="http://169.254.169.254/mcp")
    with pytest.raises(ValidationError, match="link-local address"):
        server.full_clean()


def test_the_servers_file_refuses_a_private_url_unless_the_setting_allows_it(tmp_path, settings):
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"lan": {"url": "http://192.168.1.10:3000/mcp"}}}))
    with pytest.raises(ServersFileError, match="'lan': 192.168.1.10 is a private address"):
        mcp_servers_file_read(path)
    settings.CONDUCTOR_MCP_ALLOW_PRIVATE_URLS = True
    assert list(mcp_servers_file_read(path)) == ["lan"]


def test_a_server_saved_before_the_rule_is_refused_when_it_is_called(own_http_server_url):
    server = own_http_server(own_http_server_url, refresh=False)
    assert not mcp_server_refresh(server=server)
    server.refresh_from_db()
    assert "was not reached: 127.0.0.1 is a loopback address" in server.last_error, server.last_error


def test_a_name_that_resolves_to_loopback_is_refused_when_it_is_called(own_http_server_url, monkeypatch):
    port = own_http_server_url.rsplit(":", 1)[1].split("/")[0]

    async def resolved(host, port):
        return ["127.0.0.1"]

    monkeypatch.setattr(mcp_http, "_addresses", resolved)
    server = own_http_server(f"http://mcp.example.test:{port}/mcp", refresh=False)
    assert not mcp_server_refresh(server=server)
    server.refresh_from_db()
    assert "mcp.example.test (127.0.0.1) is a loopback address" in server.last_error, server.last_error


def test_a_dns_answer_that_turns_to_loopback_after_the_check_is_refused_at_the_connection(
    own_http_server_url, monkeypatch
):
    port = own_http_server_url.rsplit(":", 1)[1].split("/")[0]
    answers = iter([["93.184.215.14"]])

    async def rebinding(host, port):
        return next(answers, ["127.0.0.1"])  # public for the check, loopback for the connection

    monkeypatch.setattr(mcp_http, "_addresses", rebinding)
    server = own_http_server(f"http://mcp.example.test:{port}/mcp", refresh=False)
    assert not mcp_server_refresh(server=server)
    server.refresh_from_db()
    assert "ConnectError: mcp.example.test (127.0.0.1) is a loopback address" in server.last_error, (
        server.last_error
    )
    assert not server.tools.exists()


def test_with_the_setting_a_loopback_server_is_listed(own_http_url):
    assert own_http_server(own_http_url).tools.filter(name="add").exists()
