"""The plugin's Firefox package in real headless Firefox ESR, driven through WebDriver BiDi.

Debian's ``firefox-esr`` is started with its remote agent
(``--remote-debugging-port``, ``-remote-allow-system-access`` so that a tab
may show the extension's own pages), in a profile of its own that fixes the
add-on's moz-extension uuid (``extensions.webextensions.uuids``). One BiDi
session installs the package ``make plugin`` builds as a temporary add-on
(``webExtension.install``), and serves the mock chat apps of
``chat_apps.py`` at their real origins by intercepting their requests
(``network.addIntercept`` + ``network.provideResponse``, request bodies
through ``network.addDataCollector`` + ``network.getData``), the way
Playwright's ``context.route`` serves them to Chromium: the same mock apps
serve both browsers. BiDi is the W3C protocol Firefox itself speaks, so no
driver program (geckodriver is no Debian package) and no downloaded browser
is needed; the client is a few lines over ``websockets``.

Without Firefox the tests are skipped, unless ``CONDUCTOR_REQUIRE_BROWSER=1``
(as ``.ci/run`` sets it), which makes a missing browser a failure.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.sync.client import ClientConnection, connect

from tests.server import ROOT, free_port, wait_for

logger = logging.getLogger(__name__)

FIREFOX = os.environ.get("CONDUCTOR_FIREFOX") or shutil.which("firefox-esr") or shutil.which("firefox")
# What bin/build-plugin writes into the Firefox manifest, and the uuid this profile gives it.
ADDON_ID = "conductor-plugin@conductor.invalid"
ADDON_UUID = "7c0d0c70-5e1f-4a3b-9c2d-c0ffee000070"
WAIT = 30
COMMAND_TIMEOUT = 60


def require_firefox() -> str:
    """The Firefox executable, or skip (fail under ``CONDUCTOR_REQUIRE_BROWSER=1``) when there is none."""
    if not FIREFOX:
        if os.environ.get("CONDUCTOR_REQUIRE_BROWSER") == "1":
            pytest.fail("Firefox is required (CONDUCTOR_REQUIRE_BROWSER=1) but not installed: apt-get install firefox-esr")
        pytest.skip("Firefox is not installed (apt-get install firefox-esr)")
    return FIREFOX


def build_firefox_package(out_dir: Path) -> Path:
    """The Firefox zip of ``make plugin`` (bin/build-plugin), built into ``out_dir``."""
    subprocess.run([str(ROOT / "bin" / "build-plugin"), str(out_dir)], check=True, capture_output=True)
    [package] = out_dir.glob("conductor-plugin-*-firefox.zip")
    return package


def package_granting(package: Path, origins: list[str], out: Path) -> Path:
    """A copy of ``package`` whose manifest grants ``origins`` at install, as a person's "Allow" would
    (a headless browser answers no permission prompt; see test_sites.py's docstring)."""
    with zipfile.ZipFile(package) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as copy:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "manifest.json":
                manifest = json.loads(data)
                manifest["host_permissions"] += [f"{origin}/*" for origin in origins]
                data = json.dumps(manifest).encode()
            copy.writestr(info, data)
    return out


class BidiError(AssertionError):
    pass


class Bidi:
    """A WebDriver BiDi session over one WebSocket: commands wait for their
    answer; events go to the handlers registered by method, each called in a
    worker thread (a handler may send commands itself)."""

    def __init__(self, url: str) -> None:
        self._socket: ClientConnection = connect(url, max_size=None, open_timeout=COMMAND_TIMEOUT, legacy=True)
        self._ids = itertools.count(1)
        self._waiting: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._handlers: dict[str, Callable[[dict[str, Any]], None]] = {}
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="bidi-event")
        self._reader = threading.Thread(target=self._read, daemon=True, name="bidi-reader")
        self._reader.start()

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        command_id = next(self._ids)
        answer: Future = Future()
        with self._lock:
            self._waiting[command_id] = answer
        self._socket.send(json.dumps({"id": command_id, "method": method, "params": params}))
        message = answer.result(timeout=COMMAND_TIMEOUT)
        if message.get("type") == "error":
            raise BidiError(f"{method}: {message.get('error')}: {message.get('message')}")
        return message["result"]

    def on(self, method: str, handler: Callable[[dict[str, Any]], None]) -> None:
        self._handlers[method] = handler

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _read(self) -> None:
        with contextlib.suppress(Exception):
            for raw in self._socket:
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        answer = self._waiting.pop(message["id"], None)
                    if answer is not None:
                        answer.set_result(message)
                elif (handler := self._handlers.get(message.get("method"))) is not None:
                    self._pool.submit(self._call, handler, message["params"])

    @staticmethod
    def _call(handler, params) -> None:
        try:
            handler(params)
        except Exception:  # noqa: BLE001 - a failed handler must not end the reader; pytest shows the log of a failed test
            logger.warning("action=bidi_event_failed handler=%s", getattr(handler, "__name__", handler), exc_info=True)


def remote_value(value: dict[str, Any]) -> Any:
    """A BiDi RemoteValue of what ``Tab.evaluate`` returns (JSON, made a string in the page) as Python."""
    if value.get("type") == "string":
        return json.loads(value["value"])
    return None


@dataclass
class Tab:
    """One top-level browsing context of the session."""

    bidi: Bidi
    context: str

    def goto(self, url: str) -> None:
        self.bidi.send("browsingContext.navigate", context=self.context, url=url, wait="complete")

    def evaluate(self, expression: str, arg: Any = None) -> Any:
        """``expression`` evaluated in the page (called with ``arg`` when one is given), awaited, as JSON."""
        call = f"({expression})({json.dumps(arg)})" if arg is not None else f"({expression})"
        result = self.bidi.send(
            "script.evaluate", expression=f"Promise.resolve({call}).then((value) => JSON.stringify(value ?? null))",
            target={"context": self.context}, awaitPromise=True,
        )
        if result["type"] == "exception":
            raise BidiError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return remote_value(result["result"])

    def click(self, selector: str) -> None:
        """A person's click on the element (real input through BiDi: a user gesture, which a script's click() is not)."""
        self.evaluate("(selector) => document.querySelector(selector).scrollIntoView({block: 'center'})", selector)
        found = self.bidi.send("script.evaluate", expression=f"document.querySelector({json.dumps(selector)})",
                               target={"context": self.context}, awaitPromise=False)
        element = {"sharedId": found["result"]["sharedId"]}
        self.bidi.send("input.performActions", context=self.context, actions=[{
            "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [{"type": "pointerMove", "x": 0, "y": 0, "origin": {"type": "element", "element": element}},
                        {"type": "pointerDown", "button": 0}, {"type": "pointerUp", "button": 0}],
        }])

    def close(self) -> None:
        with contextlib.suppress(BidiError):
            self.bidi.send("browsingContext.close", context=self.context)


@dataclass
class Request:
    """What ``ChatApp.handle`` reads of a Playwright request."""

    url: str
    method: str
    headers: dict[str, str]
    post_data: str | None


@dataclass
class Route:
    """What ``ChatApp.handle`` calls of a Playwright route: the intercepted request, answered once."""

    bidi: Bidi
    request_id: str
    request: Request

    def fulfill(self, *, status: int, content_type: str, body: str) -> None:
        self.bidi.send(
            "network.provideResponse", request=self.request_id, statusCode=status, reasonPhrase="OK" if status == 200 else "Mock",
            headers=[{"name": "content-type", "value": {"type": "string", "value": content_type}}],
            body={"type": "string", "value": body},
        )


@dataclass
class Routes:
    """``context.route`` for Firefox: a URL glob (``https://claude.ai/**``) and its handler, per intercepted origin."""

    bidi: Bidi
    collector: str
    handlers: list[tuple[str, Callable[[Route], None]]] = field(default_factory=list)

    def route(self, pattern: str, handler: Callable[[Route], None]) -> None:
        parts = urlsplit(pattern.replace("**", ""))
        self.bidi.send("network.addIntercept", phases=["beforeRequestSent"],
                       urlPatterns=[{"type": "pattern", "protocol": parts.scheme, "hostname": parts.hostname}])
        self.handlers.append((pattern.replace("**", "*"), handler))

    def on_request(self, params: dict[str, Any]) -> None:
        if not params.get("isBlocked"):
            return
        request = params["request"]
        handler = next((handler for pattern, handler in self.handlers if fnmatch(request["url"], pattern)), None)
        if handler is None:
            self.bidi.send("network.continueRequest", request=request["request"])
            return
        headers = {header["name"].lower(): header["value"].get("value", "") for header in request["headers"]}
        body = self.body_of(request) if request["method"] not in ("GET", "HEAD") else None
        handler(Route(self.bidi, request["request"], Request(request["url"], request["method"], headers, body)))

    def body_of(self, request: dict[str, Any]) -> str:
        try:
            data = self.bidi.send("network.getData", dataType="request", request=request["request"], collector=self.collector)
        except BidiError:
            return ""  # a request without a body
        value = data["bytes"]
        return base64.b64decode(value["value"]).decode() if value["type"] == "base64" else value["value"]


@dataclass
class FirefoxPlugin:
    """Firefox with the plugin's package installed; the helpers the tests use, as
    ``extension.PluginBrowser`` gives them for Chromium (``context.route`` included)."""

    bidi: Bidi
    context: Routes
    extension_tab: Tab

    def extension_url(self, path: str) -> str:
        return f"moz-extension://{ADDON_UUID}/{path}"

    def new_tab(self, url: str | None = None) -> Tab:
        tab = Tab(self.bidi, self.bidi.send("browsingContext.create", type="tab")["context"])
        if url:
            tab.goto(url)
        return tab

    def contexts(self) -> list[str]:
        """The ids of the session's top-level browsing contexts (its tabs)."""
        return [tree["context"] for tree in self.bidi.send("browsingContext.getTree", maxDepth=0)["contexts"]]

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)  # the routes are served by the session's own threads

    def wait_until(self, predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
        return wait_for(predicate, what, timeout)

    def pair(self, server_url: str, client_id: str, token: str) -> None:
        """Fill in and save the options page's three fields (under "Advanced"), as a person does."""
        page = self.new_tab(self.extension_url("options/options.html"))
        page.evaluate("""([url, client, token]) => {
          document.querySelector("#advanced").open = true;
          for (const [id, value] of [["server-url", url], ["client-id", client], ["token", token]]) {
            const input = document.getElementById(id);
            input.value = value;
            input.dispatchEvent(new Event("input", { bubbles: true }));
          }
          document.getElementById("save").click();
        }""", [server_url, client_id, token])
        self.wait_until(lambda: page.evaluate("document.getElementById('saved').textContent.startsWith('Saved')"),
                        "the options to save")
        page.close()

    def storage(self, area: str = "local") -> dict[str, Any]:
        return self.extension_tab.evaluate(f"chrome.storage.{area}.get(null)")

    def status(self) -> dict[str, Any]:
        return self.storage("session").get("status") or {}

    def badge(self) -> str:
        return self.extension_tab.evaluate("chrome.action.getBadgeText({})")

    def wait_for_state(self, state: str, timeout: float = WAIT) -> dict[str, Any]:
        return self.wait_until(
            lambda: (status := self.status()).get("state") == state and status,
            f"the plugin to become {state!r} (it is {self.status()})", timeout,
        )

    def popup_text(self) -> str:
        page = self.new_tab(self.extension_url("popup/popup.html"))
        self.wait_until(lambda: page.evaluate("document.getElementById('state').textContent !== '…'"), "the popup's state")
        text = page.evaluate("document.body.innerText")
        page.close()
        return text

    def tab_id(self, page: Tab) -> int:
        """The id of ``page``'s tab, as the extension knows it (chrome.tabs.query by its URL)."""
        url = page.evaluate("location.href")
        [tab] = self.extension_tab.evaluate("(url) => chrome.tabs.query({url}).then((tabs) => tabs.map((tab) => tab.id))", url)
        return tab

    def open_chat(self, app) -> Tab:
        """A tab showing ``app``'s conversation, once the plugin's content script is running in it."""
        page = self.new_tab(app.page_url)
        self.wait_until(lambda: page.evaluate("typeof window.mockChat === 'object'"), "the mock chat page")
        time.sleep(0.3)  # the content script loads as a module after the hook handed over its port
        return page


def firefox_profile(profile: Path) -> Path:
    """A profile whose add-on gets ADDON_UUID, so that the extension's pages have known URLs."""
    profile.mkdir(parents=True, exist_ok=True)
    uuids = json.dumps({ADDON_ID: ADDON_UUID})
    (profile / "user.js").write_text(f"user_pref(\"extensions.webextensions.uuids\", {json.dumps(uuids)});\n")
    return profile


@contextlib.contextmanager
def firefox_plugin(firefox: str, profile: Path, package: Path) -> Iterator[FirefoxPlugin]:
    """Headless Firefox with ``package`` installed as a temporary add-on, in a BiDi session."""
    port = free_port()
    log = (profile.parent / "firefox.log").open("w")
    process = subprocess.Popen(
        [firefox, "--headless", "--no-remote", "--profile", str(firefox_profile(profile)),
         "--remote-debugging-port", str(port), "-remote-allow-system-access"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    bidi = None
    try:
        bidi = wait_for(lambda: _connected(f"ws://127.0.0.1:{port}/session"), "Firefox's remote agent", WAIT)
        bidi.send("session.new", capabilities={"alwaysMatch": {"acceptInsecureCerts": True}})
        collector = bidi.send("network.addDataCollector", dataTypes=["request"], maxEncodedDataSize=10_000_000)["collector"]
        routes = Routes(bidi, collector)
        bidi.on("network.beforeRequestSent", routes.on_request)
        bidi.send("session.subscribe", events=["network.beforeRequestSent"])
        bidi.send("webExtension.install", extensionData={"type": "archivePath", "path": str(package)})
        [first] = bidi.send("browsingContext.getTree", maxDepth=0)["contexts"]
        extension_tab = Tab(bidi, first["context"])
        extension_tab.goto(f"moz-extension://{ADDON_UUID}/options/options.html")
        yield FirefoxPlugin(bidi=bidi, context=routes, extension_tab=extension_tab)
    finally:
        if bidi is not None:
            with contextlib.suppress(Exception):
                bidi.send("session.end")
            bidi.close()
        # Its own process group (start_new_session): the content processes go with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _connected(url: str) -> Bidi | None:
    try:
        return Bidi(url)
    except OSError:
        return None
