"""The reference plugin loaded unpacked into real headless Chromium, and a scripted server peer.

``plugin_browser`` starts Debian's Chromium with ``plugin/`` loaded
(``--load-extension``, new headless), in a profile of its own, and gives the
extension's service worker, its id and helpers to pair it through its
options page and read its state. ``ScriptedServer`` is a WebSocket peer that
speaks SPEC §6 from the server's side as a test scripts it (close codes,
repeated deliveries), counting the connections it gets; the end-to-end tests
use a running Conductor instead.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.exceptions import SynchronousOnlyOperation
from django.db import connections
from websockets.sync.server import Server, ServerConnection, serve

from tests.browser import CHROMIUM_ARGS
from tests.server import ROOT, wait_for

PLUGIN = ROOT / "plugin"
WAIT_MS = 30_000


@dataclass
class PluginBrowser:
    context: Any
    worker: Any
    extension_id: str

    def pause(self, seconds: float) -> None:
        """Wait while Playwright goes on serving routes (a plain sleep would stall every mock page)."""
        self.context.pages[0].wait_for_timeout(seconds * 1000)

    def extension_url(self, path: str) -> str:
        return f"chrome-extension://{self.extension_id}/{path}"

    def pair(self, server_url: str, client_id: str, token: str, *, read_streams: bool = True,
             insert_guide: bool = False) -> None:
        """Fill in and save the options page's three fields (under "Advanced"), as a person does."""
        page = self.context.new_page()
        page.goto(self.extension_url("options/options.html"))
        page.click("#advanced summary")
        page.fill("#server-url", server_url)
        page.fill("#client-id", client_id)
        page.fill("#token", token)
        if not read_streams:
            page.uncheck("#read-streams")
        if insert_guide:
            page.check("#insert-guide")
        page.click("#save")
        self.wait_in_extension_page(page, "document.getElementById('saved').textContent.startsWith('Saved')", "the options to save")
        page.close()

    def open_options(self) -> Any:
        page = self.context.new_page()
        page.goto(self.extension_url("options/options.html"))
        return page

    def paste_pairing_code(self, page) -> None:
        """Paste the clipboard into the options page's pairing field (Ctrl+V), as a person does."""
        page.bring_to_front()
        page.focus("#pairing-code")
        page.keyboard.press("Control+V")

    def pairing_outcome(self, page) -> str:
        return page.evaluate("document.getElementById('pairing-outcome').textContent")

    def storage(self, area: str = "local") -> dict[str, Any]:
        return self.worker.evaluate(f"chrome.storage.{area}.get(null)")

    def status(self) -> dict[str, Any]:
        return self.storage("session").get("status") or {}

    def badge(self) -> str:
        return self.worker.evaluate("chrome.action.getBadgeText({})")

    def wait_until(self, predicate: Callable[[], Any], what: str, timeout: float = WAIT_MS / 1000) -> Any:
        """Poll ``predicate`` while routes are served, and return its first true value."""
        return wait_for(predicate, what, timeout, sleep=self.pause)

    def wait_for_state(self, state: str, timeout: float = WAIT_MS / 1000) -> dict[str, Any]:
        return self.wait_until(
            lambda: (status := self.status()).get("state") == state and status,
            f"the plugin to become {state!r} (it is {self.status()})", timeout,
        )

    def wait_in_extension_page(self, page, expression: str, what: str) -> None:
        """Wait until ``expression`` is true in one of the extension's pages.

        Not ``wait_for_function``: when its first check is false it polls with
        an ``eval``, which the extension's CSP refuses ("unsafe-eval"), so it
        failed whenever a loaded machine made the page slower than that check.
        """
        self.wait_until(lambda: page.evaluate(expression), what)

    def stop_worker(self, page) -> None:
        """Stop the extension's service worker, as Chrome stops an idle one (its globals and timers die)."""
        cdp = self.context.new_cdp_session(page)
        try:
            for target in cdp.send("Target.getTargets")["targetInfos"]:
                if target["type"] == "service_worker" and target["url"].startswith(self.extension_url("")):
                    cdp.send("Target.closeTarget", {"targetId": target["targetId"]})
        finally:
            cdp.detach()

    def popup_text(self) -> str:
        page = self.context.new_page()
        page.goto(self.extension_url("popup/popup.html"))
        self.wait_in_extension_page(page, "document.getElementById('state').textContent !== '…'", "the popup to show its state")
        text = page.inner_text("body")
        page.close()
        return text

    def open_popup(self, active_tab=None) -> Any:
        """The popup's page in a tab of its own; ``active_tab`` (a page) is then
        brought to the front, so that it is the tab the popup acts on, as the
        tab under a real popup is."""
        page = self.context.new_page()
        page.goto(self.extension_url("popup/popup.html"))
        self.wait_in_extension_page(page, "document.getElementById('state').textContent !== '…'", "the popup to show its state")
        if active_tab is not None:
            active_tab.bring_to_front()
        return page

    def insert_guide(self, popup) -> str:
        """Press the popup's "Insert tool guide" and return what it then says.
        The popup's tab is in the background: clicked and polled without
        waiting for animation frames, which a background tab does not get."""
        popup.evaluate("document.getElementById('insert-guide').click()")
        self.wait_in_extension_page(popup, "document.getElementById('guide-outcome').dataset.ok !== undefined",
                                    "the popup to say how the tool guide went")
        return popup.evaluate("document.getElementById('guide-outcome').textContent")

    def tab_id(self, page) -> int:
        """The id of ``page``'s tab, as the extension knows it (chrome.tabs.query by its URL)."""
        [tab] = self.worker.evaluate("(url) => chrome.tabs.query({url}).then((tabs) => tabs.map((tab) => tab.id))", page.url)
        return tab

    def open_panel(self, tab: int | None = None) -> Any:
        """The side panel's page in a tab of its own, side-panel sized; pinned to tab ``tab``, else
        following the active tab of its window."""
        page = self.context.new_page()
        page.set_viewport_size({"width": 400, "height": 720})
        page.goto(self.extension_url("panel/panel.html" + ("" if tab is None else f"?tab={tab}")))
        return page

    def open_chat(self, app) -> Any:
        """A tab showing ``app``'s conversation, once the plugin's content script is running in it."""
        page = self.context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(app.page_url)
        page.wait_for_function("typeof window.mockChat === 'object'")
        self.wait_for_content_script(page)
        return page

    def wait_for_content_script(self, page) -> None:
        """Wait until the plugin's content script in ``page``'s tab answers the worker's messages.

        It loads as a module after the page hook handed over its port, so on a
        loaded machine later than the page's own script: a delivery sent before
        finds no content script there and opens a tab of its own instead. A
        message of no known type is refused by a listening content script
        ("port closed") and by none with "Receiving end does not exist".
        """
        self.wait_until(lambda: self.worker.evaluate(_CONTENT_SCRIPT_LISTENS, page.url), "the content script in the chat's tab")


_CONTENT_SCRIPT_LISTENS = """async (url) => {
  const tabs = await chrome.tabs.query({url});
  if (tabs.length !== 1) return false;
  try {
    await chrome.tabs.sendMessage(tabs[0].id, {type: "test.ping"});
    return true;
  } catch (error) {
    return !String(error?.message).includes("Receiving end does not exist");
  }
}"""


@contextlib.contextmanager
def plugin_browser(chromium: str, profile: Path, extension: Path = PLUGIN) -> Iterator[PluginBrowser]:
    """Chromium with the plugin loaded unpacked from ``extension`` (by default the sources in ``plugin/``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=chromium, headless=True,
            args=[*CHROMIUM_ARGS, f"--disable-extensions-except={extension}", f"--load-extension={extension}"],
        )
        try:
            workers = context.service_workers
            worker = workers[0] if workers else context.wait_for_event("serviceworker", timeout=WAIT_MS)
            yield PluginBrowser(context=context, worker=worker, extension_id=worker.url.split("/")[2])
        finally:
            context.close()
            # With Playwright's loop running in this thread, the ORM's
            # connections opened meanwhile belong to that context, where the
            # test database's teardown would not close them. A test that did
            # not allow the ORM there (DJANGO_ALLOW_ASYNC_UNSAFE) opened none.
            with contextlib.suppress(SynchronousOnlyOperation):
                connections.close_all()


@dataclass
class ScriptedServer:
    """A server peer on a free port. ``on_hello`` decides what a hello gets:
    ``None`` accepts it; a close code closes the socket with that code."""

    on_hello: Callable[[dict[str, Any]], int | None] = lambda hello: None
    ack_final_messages: bool = True
    # What a guide.get gets: this guide, an error frame with ``guide_error`` as
    # its code, or (``answer_guides`` false) no answer at all.
    guide_version: str = "9f8e7d6c5b4a"
    guide_text: str = "# Conductor tools\n\nWrite a block:\n\n```baa\nfiles.list\n{\"path\": \".\"}\n```"
    guide_error: str | None = None
    answer_guides: bool = True
    # Said in hello.ok: the plugin is older than the server supports.
    plugin_outdated: bool = False
    # Error codes to answer the next final messages with, one per frame, before acks resume.
    refusals: list[str] = field(default_factory=list)
    # hello.ok's `plugin_outdated` (SPEC §9).
    plugin_outdated: bool = False
    # The side panel's frames (SPEC §6): hello.ok's and status's `approvals_waiting` (None: left out, as
    # an older server does); what status.get answers per conversation id (`{"paused": ..., "messages": [...]}`,
    # an unknown one: none); what conversation.pause/resume get: an ack, or an error with this code.
    approvals_waiting: int | None = None
    conversation_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    answer_status: bool = True
    pause_error: str | None = None
    # How to wait: a test with a browser passes PluginBrowser.pause, so that routes are served meanwhile.
    sleep: Callable[[float], None] = time.sleep
    connections: int = 0
    hellos: list[dict[str, Any]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    _server: Server | None = None
    _current: ServerConnection | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> ScriptedServer:
        self._server = serve(self._serve, "127.0.0.1", 0)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.socket.getsockname()[1]}"

    def _serve(self, connection: ServerConnection) -> None:
        with self._lock:
            self.connections += 1
        hello = json.loads(connection.recv())
        with self._lock:
            self.hellos.append(hello)
        code = self.on_hello(hello)
        if code is not None:
            connection.send(json.dumps({"type": "error", "code": "unauthorized", "detail": "scripted"}))
            connection.close(code, "scripted")
            return
        hello_ok = {"type": "hello.ok", "client_id": hello.get("client_id"), "server_time": 0,
                    "plugin_outdated": self.plugin_outdated}
        if self.approvals_waiting is not None:
            hello_ok["approvals_waiting"] = self.approvals_waiting
        connection.send(json.dumps(hello_ok))
        self._current = connection
        with contextlib.suppress(Exception):
            for raw in connection:
                frame = json.loads(raw)
                with self._lock:
                    self.received.append(frame)
                if frame.get("type") == "ping":
                    connection.send(json.dumps({"type": "pong"}))
                elif frame.get("type") == "guide.get" and self.guide_error:
                    connection.send(json.dumps({"type": "error", "id": frame.get("id"), "code": self.guide_error,
                                                "detail": "scripted guide refusal"}))
                elif frame.get("type") == "guide.get" and self.answer_guides:
                    connection.send(json.dumps({"type": "guide", "id": frame.get("id"), "version": self.guide_version,
                                                "text": self.guide_text}))
                elif frame.get("type") == "status.get" and self.answer_status:
                    connection.send(json.dumps(self._status_of(frame)))
                elif frame.get("type") in ("conversation.pause", "conversation.resume"):
                    connection.send(json.dumps(self._pause_answer(frame)))
                elif frame.get("type") == "browser.final_message" and self.refusals:
                    code = self.refusals.pop(0)
                    connection.send(json.dumps({"type": "error", "id": frame["id"], "code": code, "detail": "scripted"}))
                elif frame.get("type") == "browser.final_message" and self.ack_final_messages:
                    connection.send(json.dumps({
                        "type": "ack", "id": frame["id"], "message_id": str(len(self.received)),
                        "instructions": 0, "duplicate": False,
                    }))

    def _status_of(self, frame: dict[str, Any]) -> dict[str, Any]:
        known = self.conversation_status.get(frame.get("conversation_id"), {})
        answer = {"type": "status", "id": frame.get("id"), "platform": frame.get("platform"),
                  "conversation_id": frame.get("conversation_id"), "paused": known.get("paused", False),
                  "messages": known.get("messages", [])}
        if self.approvals_waiting is not None:
            answer["approvals_waiting"] = self.approvals_waiting
        return answer

    def _pause_answer(self, frame: dict[str, Any]) -> dict[str, Any]:
        if self.pause_error:
            return {"type": "error", "id": frame.get("id"), "code": self.pause_error, "detail": "scripted pause refusal"}
        is_paused = frame["type"] == "conversation.pause"
        self.conversation_status.setdefault(frame.get("conversation_id"), {})["paused"] = is_paused
        return {"type": "ack", "id": frame.get("id"), "paused": is_paused}

    def send(self, frame: dict[str, Any]) -> None:
        self._current.send(json.dumps(frame))

    def close_current(self, code: int) -> None:
        self._current.close(code, "scripted")

    def frames(self, type_: str) -> list[dict[str, Any]]:
        with self._lock:
            return [frame for frame in self.received if frame.get("type") == type_]

    def wait_for_frames(self, type_: str, count: int = 1, timeout: float = WAIT_MS / 1000) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(found := self.frames(type_)) >= count:
                return found
            self.sleep(0.05)
        raise AssertionError(f"expected {count} {type_} frames, got {self.frames(type_)}")
