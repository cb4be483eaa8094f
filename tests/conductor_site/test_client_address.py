"""The client address the admin login's lockout is keyed on (conductor_site/client_address.py)."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from conductor_site.client_address import client_address, trusted_proxies_parse

pytestmark = pytest.mark.database_free

PROXY = "10.0.0.10"


@pytest.mark.parametrize(("trusted", "remote", "forwarded", "client"), [
    # No proxy named: the peer, whatever the header says.
    ((), "203.0.113.66", "198.51.100.7", "203.0.113.66"),
    ((), PROXY, "198.51.100.7", PROXY),
    # A named proxy: the right-most forwarded entry that is not a named proxy.
    ((PROXY,), PROXY, "198.51.100.7", "198.51.100.7"),
    ((PROXY,), PROXY, "198.51.100.7, 203.0.113.66", "203.0.113.66"),
    (("10.0.0.0/24",), PROXY, "198.51.100.7, 10.0.0.20", "198.51.100.7"),
    ((PROXY, "10.0.0.20"), PROXY, "198.51.100.7, 10.0.0.20", "198.51.100.7"),
    ((PROXY,), PROXY, " 2001:db8::1 ", "2001:db8::1"),
    # The peer is not a named proxy: its header is not read.
    ((PROXY,), "203.0.113.66", "198.51.100.7", "203.0.113.66"),
    # Nothing forwarded, or nothing usable: the last address a named proxy vouched for.
    ((PROXY,), PROXY, None, PROXY),
    ((PROXY,), PROXY, "", PROXY),
    ((PROXY,), PROXY, "198.51.100.7, not-an-address", PROXY),
    (("10.0.0.0/24",), PROXY, "not-an-address, 10.0.0.20", "10.0.0.20"),
    # A dual-stack listener's view of an IPv4 proxy.
    ((PROXY,), f"::ffff:{PROXY}", "198.51.100.7", "198.51.100.7"),
])
def test_the_client_is_read_from_the_header_only_behind_a_named_proxy(settings, trusted, remote, forwarded, client):
    settings.CONDUCTOR_TRUSTED_PROXIES = trusted
    headers = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        headers["HTTP_X_FORWARDED_FOR"] = forwarded
    assert client_address(RequestFactory().post("/admin/login/", **headers)) == client


def test_the_setting_takes_addresses_and_networks():
    assert trusted_proxies_parse([" 10.0.0.10", "", "10.0.0.0/24", "2001:db8::/64"]) == (
        "10.0.0.10", "10.0.0.0/24", "2001:db8::/64",
    )
    with pytest.raises(ImproperlyConfigured, match="'proxy.example.org' is not an IP address"):
        trusted_proxies_parse(["proxy.example.org"])
