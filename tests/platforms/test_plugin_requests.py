"""The requests ``platforms/`` builds are the ones the plugin's allow-list test checks."""

from tests.platforms.plugin_requests import FIXTURE, fixture_text


def test_the_plugins_fixture_is_what_the_platforms_build_today():
    # When this fails, a platform's request changed: write the fixture again
    # (python -m tests.platforms.plugin_requests) and run
    # node --test plugin/tests/delivery-rules.test.js, whose allow-list must
    # then admit the new request (plugin/adapters/<platform>.js `deliveryRequests`).
    assert FIXTURE.read_text() == fixture_text()
