import pytest

from console.helpers import (
    relative_age,
    displayable_text,
    json_block,
    json_text_block,
    link_or_text,
    readable_json,
    readable_json_text,
    safe_link_url,
    text_block,
)


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


@pytest.mark.parametrize(
    "text,shown",
    [
        ("plain", "plain"),
        ("caf\u00e9 \U0001f600", "caf\u00e9 \U0001f600"),
        ("a\ud800b", "a\ufffdb"),
        ("\udc00", "\ufffd"),
        ("x\ud800\ud800y", "x\ufffd\ufffdy"),
        ("\ud83d\ude00", "\U0001f600"),  # a pair kept as two code points becomes its character
    ],
)
def test_displayable_text_replaces_lone_surrogates_only(text, shown):
    assert displayable_text(text) == shown
    displayable_text(text).encode("utf-8")  # never raises


def test_readable_json_shows_non_ascii_as_itself_and_lone_surrogates_replaced():
    assert readable_json({"b": "caf\u00e9", "a": "\ud800"}, sort_keys=True) == (
        '{\n  "a": "\ufffd",\n  "b": "caf\u00e9"\n}'
    )


@pytest.mark.parametrize(
    "text,shown",
    [
        ('{"b": 1, "a": "\\ud800"}', '{\n  "a": "\ufffd",\n  "b": 1\n}'),
        ("not json \ud800", "not json \ufffd"),
    ],
)
def test_readable_json_text_indents_json_and_keeps_other_text(text, shown):
    assert readable_json_text(text) == shown


def test_a_text_block_escapes_its_text_and_replaces_lone_surrogates():
    assert text_block("<b>\ud800</b>") == '<pre class="conductor-text">&lt;b&gt;\ufffd&lt;/b&gt;</pre>'
    assert text_block("x", css_class="message-text", in_table=True) == (
        '<pre class="message-text conductor-text in-table">x</pre>'
    )


def test_a_json_block_indents_the_value_escaped_and_shows_none_as_a_dash():
    assert json_block({"b": "<i>", "a": 1}, sort_keys=True) == (
        '<pre class="conductor-json conductor-text">'
        '{\n  &quot;a&quot;: 1,\n  &quot;b&quot;: &quot;&lt;i&gt;&quot;\n}</pre>'
    )
    assert json_block(None) == "-"


def test_a_json_text_block_shows_text_that_is_not_json_as_it_is_and_none_as_a_dash():
    assert json_text_block("not json <\ud800>") == (
        '<pre class="conductor-json conductor-text">not json &lt;\ufffd&gt;</pre>'
    )
    assert json_text_block(None) == "-"


@pytest.mark.parametrize(
    "age_ms,shown", [(0, "0 s ago"), (59_999, "59 s ago"), (180_000, "3 min ago"), (7_200_000, "2 h ago"),
                     (90_000_000, "1 d ago")],
)
def test_relative_age_says_the_largest_unit(age_ms, shown):
    assert relative_age(1_000_000_000 - age_ms, now=1_000_000_000) == shown
