import pytest

from conductor_site.admin_display import link_or_text, safe_link_url


@pytest.mark.parametrize(
    "url",
    [
        "https://claude.ai/chat/abc",
        "HTTPS://chatgpt.com/c/1?x=1&y=2#frag",
        "https://gemini.google.com/u/1/app/abc",
        "http://localhost:8000/chat",
        "http://127.0.0.1/chat",
        "http://127.8.9.10:3000/",
        "http://[::1]:8000/",
        "http://app.localhost/",
    ],
)
def test_https_and_loopback_http_urls_are_links(url):
    assert safe_link_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "",
        None,
        "javascript:alert(document.domain)//",
        "JavaScript:alert(1)",
        " javascript:alert(1)",
        "java\tscript:alert(1)",
        "java\nscript:alert(1)",
        "javascript://https://claude.ai/%0aalert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:msgbox(1)",
        "file:///etc/passwd",
        "ftp://example.com/",
        "http://claude.ai/chat/abc",  # plain http off the machine
        "http://localhost.evil.com/",
        "https:claude.ai/chat",  # no host
        "//claude.ai/chat",  # scheme-relative
        "/admin/",
        "https://[::1/",  # unparseable host
        "https://claude.ai/chat/a b",
    ],
)
def test_other_urls_are_not_links(url):
    assert safe_link_url(url) is None


def test_an_unsafe_url_is_shown_as_escaped_text():
    shown = link_or_text('javascript:alert("<b>")//')
    assert "<a " not in shown and "href" not in shown
    assert "javascript:alert(&quot;&lt;b&gt;&quot;)//" in shown


def test_a_safe_url_is_a_link_with_its_text_escaped():
    shown = link_or_text("https://claude.ai/chat?a=1&b=<x>")
    assert shown.startswith('<a href="https://claude.ai/chat?a=1&amp;b=&lt;x&gt;" rel="noreferrer noopener">')
