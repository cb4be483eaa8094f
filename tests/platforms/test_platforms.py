"""The platform adapters against their synthetic fixtures (fixtures/platforms/)."""

import json
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from platforms import platforms
from platforms.registry import (
    DeliveryTarget,
    DeliveryVerdict,
    DuplicatePlatform,
    PlatformAdapter,
    PlatformRegistry,
    ProxyAnswer,
    ProxyRequest,
    UnsupportedPlatform,
)
from platforms.sites import PageSiteAdapter, shipped_site_descriptions
from platforms.wire import (
    FORM_CONTENT_TYPE,
    fill_page_values,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "platforms"
PLATFORMS = ("claude", "chatgpt", "gemini")  # the three with network capture and requests of their own
PAGE_SITES = (
    "perplexity", "grok", "deepseek", "mistral", "aistudio", "kimi", "qwen", "copilot", "t3chat", "openrouter", "zai",
)
TRICKY_TEXTS = [
    'He said "stop" \\ then left',
    "line one\nline two\r\n\ttabbed",
    "```baa\nfiles.read\n{\"path\": \"a`b`c.md\"}\n```",
    "unicode: é ü 中文 👍 \u2028 end",
    "a page placeholder {{page:access_token}} and {{page:at_token}} stay text",
    "",
]


def load(platform, name):
    return json.loads((FIXTURES / platform / name).read_text())


def request_cases():
    return [
        pytest.param(platform, case, id=f"{platform}-{case['name']}")
        for platform in PLATFORMS
        for case in load(platform, "requests.json")["cases"]
    ]


def target_of(case, **changes):
    return replace(DeliveryTarget(**case["target"]), **changes)


def body_of(request: ProxyRequest):
    """The body as data: JSON, or for a form, its fields with f.req's inner array decoded."""
    if not request.headers["Content-Type"].startswith(FORM_CONTENT_TYPE):
        return json.loads(request.body)
    form = dict(pair.split("=", 1) for pair in request.body.split("&"))
    form = {key: unquote(value) for key, value in form.items()}
    outer_null, inner_text = json.loads(form["f.req"])
    assert outer_null is None
    form["f.req"] = json.loads(inner_text)
    return form


def sent_text(platform, request):
    body = body_of(request)
    return {
        "claude": lambda: body["prompt"],
        "chatgpt": lambda: body["messages"][0]["content"]["parts"][0],
        "gemini": lambda: body["f.req"][0][0],
    }[platform]()


def client_ids(platform, request):
    body = body_of(request)
    return {
        "claude": lambda: body["turn_message_uuids"],
        "chatgpt": lambda: body["messages"][0]["id"],
        "gemini": lambda: (body["f.req"][59], request.headers["x-goog-ext-525005358-jspb"], request.url),
    }[platform]()


# Requests ---------------------------------------------------------------------


@pytest.mark.parametrize("platform,case", request_cases())
def test_the_built_request_matches_the_fixture(platform, case):
    request = platforms.get(platform).build_request(target_of(case))
    expected = case["request"]

    assert request.method == expected["method"]
    assert request.url == expected["url"]
    assert request.headers == expected["headers"]
    if "body" in expected:
        assert json.loads(request.body) == expected["body"]
    else:
        form = body_of(request)
        assert form["at"] == expected["body_form"]["at"]
        inner, slots = form["f.req"], expected["body_form"]["f.req"]["inner_slots"]
        assert len(inner) == expected["body_form"]["f.req"]["inner_length"]
        assert {str(i): value for i, value in enumerate(inner) if value is not None} == slots
    assert request.as_frame() == {
        "method": request.method, "url": request.url, "headers": request.headers, "body": request.body,
    }


@pytest.mark.parametrize("platform,case", request_cases())
def test_placeholders_stand_exactly_where_values_are_unknown(platform, case):
    adapter = platforms.get(platform)
    target = target_of(case)
    request = adapter.build_request(target)

    assert list(request.placeholders) == case["placeholders"]
    assert set(request.placeholders) <= set(adapter.page_values)
    for known in (target.conversation_id, target.parent_message_id, target.organization_id):
        if known:
            assert known in request.url or known in request.body


@pytest.mark.parametrize(
    "platform,missing,placeholder",
    [
        ("claude", "organization_id", "org_uuid"),
        ("claude", "parent_message_id", "parent_message_uuid"),
        ("claude", "conversation_id", "conversation_uuid"),
        ("chatgpt", "parent_message_id", "parent_message_id"),
        ("chatgpt", "conversation_id", "conversation_id"),
        ("gemini", "parent_message_id", "chat_metadata.rid"),
        ("gemini", "conversation_id", "chat_metadata.cid"),
    ],
)
def test_each_unknown_id_becomes_its_page_placeholder(platform, missing, placeholder):
    case = load(platform, "requests.json")["cases"][0]
    adapter = platforms.get(platform)
    known = adapter.build_request(target_of(case))
    unknown = adapter.build_request(target_of(case, **{missing: ""}))

    assert placeholder not in known.placeholders
    assert set(unknown.placeholders) - set(known.placeholders) == {placeholder}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_the_text_round_trips_through_the_body(platform, text):
    case = load(platform, "requests.json")["cases"][0]
    request = platforms.get(platform).build_request(target_of(case, text=text))

    assert sent_text(platform, request) == text
    # A placeholder written in the text is text: the plugin must not fill it in.
    assert list(request.placeholders) == case["placeholders"]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_client_generated_ids_are_stable_for_a_delivery_key_and_differ_across_keys(platform):
    case = load(platform, "requests.json")["cases"][0]
    adapter = platforms.get(platform)
    first = adapter.build_request(target_of(case))
    retried = adapter.build_request(target_of(case, text="the same task, rendered again"))
    other = adapter.build_request(target_of(case, delivery_key="another-task"))

    assert client_ids(platform, first) == client_ids(platform, retried)
    assert client_ids(platform, first) != client_ids(platform, other)


@pytest.mark.parametrize("platform,case", request_cases())
def test_filling_the_page_values_gives_a_well_formed_request(platform, case):
    request = platforms.get(platform).build_request(target_of(case, text='quote " and {{page:timezone}}'))
    values = {name: f"{name}=/+ é&" for name in request.placeholders}  # characters a URL must encode
    values["device_id"] = ""  # a value the page lacks: its header is dropped

    filled = fill_page_values(request, values)

    assert filled.placeholders == ()
    assert "anthropic-device-id" not in filled.headers and "oai-device-id" not in filled.headers
    assert sent_text(platform, filled) == 'quote " and {{page:timezone}}'
    body = json.dumps(body_of(filled), ensure_ascii=False)
    for name in request.placeholders:
        if f"{{{{page:{name}}}}}" in request.body:
            assert values[name] in body
        if f"{{{{page:{name}}}}}" in request.url:
            assert quote(values[name], safe="") in filled.url
    with pytest.raises(KeyError, match="no page value for"):
        fill_page_values(request, {})


def test_a_page_value_in_a_json_body_is_escaped_as_string_content():
    case = load("claude", "requests.json")["cases"][1]
    request = platforms.get("claude").build_request(target_of(case))
    values = dict.fromkeys(request.placeholders, "x")

    filled = fill_page_values(request, {**values, "timezone": 'Europe/"Paris"\\', "org_uuid": "o/1"})

    assert json.loads(filled.body)["timezone"] == 'Europe/"Paris"\\'
    assert "/organizations/o%2F1/" in filled.url


# Answers ----------------------------------------------------------------------


def answer(platform, body_name=None, *, ok=True, status=200, error=None):
    body = None
    if body_name is not None:
        body = "\n".join(load(platform, "responses.json")["bodies"][body_name])
    return ProxyAnswer(ok=ok, status=status, body=body, error=error)


DELIVERED = [
    ("claude", "stream_ok", "946ffd43-6f8d-47e9-9e26-9cc8616496e3"),
    ("claude", "stream_legacy_completion", None),
    ("chatgpt", "stream_ok", "f3e2d1c0-b9a8-4776-8655-443322110099"),
    ("chatgpt", "stream_echoes_an_earlier_turn", "f3e2d1c0-b9a8-4776-8655-443322110099"),
    ("chatgpt", "stream_without_v1", "f3e2d1c0-b9a8-4776-8655-443322110099"),
    ("gemini", "stream_ok", "r_1a2b3c4d5e6f7a8b"),
    ("gemini", "stream_ok_1096_after_the_answer", "r_1a2b3c4d5e6f7a8b"),
]


@pytest.mark.parametrize("platform,body_name,remote_message_id", DELIVERED)
def test_a_2xx_stream_without_an_error_is_delivered(platform, body_name, remote_message_id):
    verdict = platforms.get(platform).read_answer(answer(platform, body_name))

    assert verdict == DeliveryVerdict(is_delivered=True, is_retryable=False, remote_message_id=remote_message_id)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("body", [None, "", "data: [DONE]", "not a stream at all"])
def test_a_2xx_answer_without_an_error_in_its_body_is_delivered(platform, body):
    verdict = platforms.get(platform).read_answer(ProxyAnswer(ok=True, status=201, body=body, error=None))

    assert verdict == DeliveryVerdict.delivered()


RETRYABLE = [
    # platform, answer, the error it gets
    ("claude", answer("claude", "stream_error_event"),
     "claude answered HTTP 200 with an error in the stream: overloaded_error: Overloaded"),
    ("claude", answer("claude", "stream_error_object"),
     "claude answered HTTP 200 with an error in the stream: rate_limit_error: You have reached your message limit."),
    ("claude", answer("claude", "http_429", ok=False, status=429),
     'claude answered HTTP 429: rate_limit_error: {"type": "exceeded_limit", "resetsAt": 1764424800'),
    ("claude", answer("claude", "http_401", ok=False, status=401),
     "claude answered HTTP 401: permission_error: Invalid authorization"),
    ("claude", answer("claude", "http_500", ok=False, status=500),
     "claude answered HTTP 500: api_error: Internal server error"),
    ("claude", answer("claude", "html_challenge"),
     "claude answered HTTP 200 with an HTML page instead of a stream: <!DOCTYPE html>"),
    ("chatgpt", answer("chatgpt", "stream_error"),
     "chatgpt answered HTTP 200 with an error in the stream: Something went wrong while generating the response."),
    ("chatgpt", answer("chatgpt", "http_429", ok=False, status=429),
     "chatgpt answered HTTP 429: You've reached our limit of messages per hour."),
    ("chatgpt", answer("chatgpt", "http_401", ok=False, status=401),
     "chatgpt answered HTTP 401: invalid_request_error: Your authentication token has expired."),
    ("chatgpt", answer("chatgpt", "http_403_unusual_activity", ok=False, status=403),
     "chatgpt answered HTTP 403: Unusual activity has been detected from your device."),
    ("chatgpt", answer("chatgpt", "http_500", ok=False, status=500),
     "chatgpt answered HTTP 500: Internal Server Error"),
    ("chatgpt", answer("chatgpt", "html_challenge"),
     "chatgpt answered HTTP 200 with an HTML page instead of a stream: <!DOCTYPE html>"),
    ("gemini", answer("gemini", "stream_error_1037"),
     "gemini answered HTTP 200 with an error in the stream: code 1037 (usage limit)"),
    ("gemini", answer("gemini", "stream_error_1013"),
     "gemini answered HTTP 200 with an error in the stream: code 1013 (transient)"),
    ("gemini", answer("gemini", "stream_error_1096_before_any_answer"),
     "gemini answered HTTP 200 with an error in the stream: code 1096"),
    ("gemini", answer("gemini", "stream_error_status_only"),
     "gemini answered HTTP 200 with an error in the stream: status 7 without a payload"),
    ("gemini", answer("gemini", "http_400_xsrf", ok=False, status=400),
     """gemini answered HTTP 400: )]}' 99 [["er",null,null,null,null,400"""),
    ("gemini", answer("gemini", "http_429", ok=False, status=429),
     "gemini answered HTTP 429: <html><head><title>429 Too Many Requests</title>"),
    ("gemini", answer("gemini", "http_500", ok=False, status=500), "gemini answered HTTP 500: )]}'"),
    # The plugin's own failures, the same for every platform.
    ("claude", ProxyAnswer(ok=False, status=None, body=None, error="TypeError: Failed to fetch"),
     "claude request failed in the page: TypeError: Failed to fetch"),
    ("chatgpt", ProxyAnswer(ok=False, status=None, body=None, error=None),
     "chatgpt request failed in the page: no error given"),
    ("gemini", ProxyAnswer(ok=False, status=200, body="", error="timed out after 30000 ms reading the stream"),
     "gemini request failed in the page (HTTP 200): timed out after 30000 ms reading the stream"),
    ("claude", ProxyAnswer(ok=True, status=None, body="", error=None),
     "claude answered without an HTTP status: no detail"),
    ("gemini", ProxyAnswer(ok=False, status=502, body="", error=None), "gemini answered HTTP 502: empty body"),
    ("chatgpt", ProxyAnswer(ok=True, status=302, body="", error="redirected"), "chatgpt answered HTTP 302: redirected"),
]


@pytest.mark.parametrize("platform,given,error", RETRYABLE)
def test_every_other_answer_is_retryable_with_a_one_line_error(platform, given, error):
    verdict = platforms.get(platform).read_answer(given)

    assert (verdict.is_delivered, verdict.is_retryable, verdict.remote_message_id) == (False, True, None)
    assert verdict.error.startswith(error), verdict.error
    assert "\n" not in verdict.error


def test_a_long_error_body_is_cut_to_an_excerpt():
    body = json.dumps({"detail": "slow down " * 100})
    verdict = platforms.get("chatgpt").read_answer(ProxyAnswer(ok=False, status=429, body=body, error=None))

    assert verdict.error.startswith("chatgpt answered HTTP 429: slow down slow down")
    assert len(verdict.error) <= len("chatgpt answered HTTP 429: ") + 200
    assert verdict.error.endswith("…")


def test_a_stored_result_reads_as_an_answer():
    stored = {"ok": True, "status": 200, "body": "data: [DONE]", "error": None}

    assert ProxyAnswer.from_result(stored) == ProxyAnswer(ok=True, status=200, body="data: [DONE]", error=None)


# Registry ---------------------------------------------------------------------


def test_every_platform_of_the_spec_has_its_adapter_registered():
    assert [adapter.name for adapter in platforms] == platforms.names() == sorted(PLATFORMS + PAGE_SITES)
    for name in PLATFORMS:
        adapter = platforms.get(name)
        assert name in platforms
        assert type(adapter).__module__ == f"platforms.{name}"


@pytest.mark.parametrize("platform", PLATFORMS)
def test_each_registered_adapter_builds_and_reads_its_own_fixtures(platform):
    adapter = platforms.get(platform)
    for case in load(platform, "requests.json")["cases"]:
        assert adapter.build_request(target_of(case)).url == case["request"]["url"]
    assert adapter.read_answer(answer(platform, "stream_ok")).is_delivered


def test_a_duplicate_platform_raises():
    registry = PlatformRegistry()

    class Example(PlatformAdapter):
        name = "example"

    registry.register(Example())
    with pytest.raises(DuplicatePlatform, match="platform 'example' is already registered"):
        registry.register(Example())


def test_an_unknown_platform_raises_with_the_known_ones():
    with pytest.raises(UnsupportedPlatform, match=r"unsupported platform 'bing'; known: aistudio, chatgpt, claude, copilot, .*, zai$"):
        platforms.get("bing")
    assert "bing" not in platforms


@pytest.mark.parametrize("name", PAGE_SITES)
def test_each_site_described_as_data_is_a_platform_delivered_through_its_composer_only(name):
    adapter = platforms.get(name)
    description = shipped_site_descriptions()[name]
    assert isinstance(adapter, PageSiteAdapter)
    assert (adapter.label, adapter.origins) == (description["title"], tuple(description["origins"]))
    assert adapter.delivery_methods == adapter.performs == ("dom",)
