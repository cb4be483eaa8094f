"""Mock chat apps at their real origins, served through Playwright's ``context.route``.

Each mock serves a conversation page and the app's streaming endpoint in the
shapes of ``../shared/PLATFORMS.md`` (the same shapes as the plugin's
fixtures under ``plugin/tests/fixtures/``): the page asks the way the app
does (Claude and ChatGPT with ``fetch``, Gemini with ``XMLHttpRequest``),
shows the app's "writing" signal while the answer streams, and renders the
answer's HTML at the end. Every POST to the endpoint is recorded, so a test
sees what the plugin posted back as a delivery.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from html import escape
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

# The page's script, one for every app: CONFIG says how this app renders and asks.
PAGE_SCRIPT = r"""
const CONFIG = __CONFIG__;
const thread = document.getElementById("thread");
let leaf = CONFIG.leaf;

function writing(isWriting, turn) {
  if (CONFIG.generating === "attribute") turn.setAttribute("data-is-streaming", String(isWriting));
  const stop = document.getElementById("stop");
  if (isWriting && !stop) {
    const marker = document.createElement(CONFIG.generating === "mat-icon" ? "mat-icon" : "button");
    marker.id = "stop";
    if (CONFIG.generating === "mat-icon") marker.setAttribute("data-mat-icon-name", "stop");
    else marker.setAttribute("data-testid", "stop-button");
    document.body.appendChild(marker);
  } else if (!isWriting && stop) stop.remove();
}

function newTurn() {
  const turn = document.createElement("div");
  turn.innerHTML = CONFIG.turn;
  thread.appendChild(turn.firstElementChild);
  return thread.lastElementChild;
}

/** Asks, and follows the app's continuation of the answer when its first response hands it off. */
async function send(prompt, signal) {
  const body = await post(CONFIG.request(prompt, leaf), signal);
  const next = CONFIG.continuation(body);
  return next ? post(next, signal) : body;
}

function post(request, signal) {
  if (CONFIG.transport === "xhr") {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("POST", request.url);
      for (const [name, value] of Object.entries(request.headers)) xhr.setRequestHeader(name, value);
      xhr.onload = () => resolve(xhr.responseText);
      xhr.onerror = () => reject(new Error("network"));
      xhr.send(request.body);
    });
  }
  return fetch(request.url, { method: "POST", headers: request.headers, body: request.body, signal }).then((r) => r.text());
}

// The composer: like ProseMirror (or Quill), the editor keeps its own state
// and takes text only from input events: an `input` (what
// execCommand("insertText") and typing fire) makes it read its DOM back, a
// cancelable `beforeinput` carrying text or a `paste` is applied to the state
// and rendered. A direct change of its DOM (innerHTML) fires none of them and
// is not in the state, so it is neither sent nor enables the send button.
// `takes` narrows what it accepts, to exercise the plugin's fallbacks: an
// input it does not take is undone by rendering the state again.
const composer = CONFIG.composer;
const editor = composer && document.querySelector(composer.editor);
const sendButton = composer && composer.send ? document.querySelector(composer.send) : null;
let draft = "";
const sent = [];

function renderDraft() {
  editor.replaceChildren(...(draft === "" ? [""] : draft.split("\n")).map((line) => {
    const paragraph = document.createElement("p");
    if (line === "") paragraph.appendChild(document.createElement("br"));
    else paragraph.textContent = line;
    return paragraph;
  }));
}

/** The editor's DOM as text: one line per block (a <p> or <div>), <br> a line end, non-breaking spaces as spaces. */
function readEditor() {
  const lines = [];
  let current = null;
  for (const node of editor.childNodes) {
    if (node.nodeName === "P" || node.nodeName === "DIV") {
      if (current !== null) lines.push(current);
      current = null;
      lines.push(node.textContent);
    } else if (node.nodeName === "BR") {
      lines.push(current ?? "");
      current = null;
    } else {
      current = (current ?? "") + node.textContent;
    }
  }
  if (current !== null) lines.push(current);
  return lines.join("\n").replace(/\u00a0/g, " ");
}

function setDraft(text, { render }) {
  draft = text;
  if (render) renderDraft();
  if (sendButton) sendButton.disabled = draft.trim() === "";
}

function takes(way) {
  return (mockChat.takes || ["input", "beforeinput", "paste"]).includes(way);
}

function addUserTurn(text) {
  const holder = document.createElement("div");
  holder.innerHTML = composer.userTurn;
  const turn = holder.firstElementChild;
  const shown = turn.querySelector(composer.userTurnText) || turn;
  if (composer.linePerParagraph) {
    for (const line of text.split("\n")) {
      const paragraph = document.createElement("p");
      paragraph.className = "query-text-line";
      if (line === "") paragraph.appendChild(document.createElement("br"));
      else paragraph.textContent = line;
      shown.appendChild(paragraph);
    }
  } else {
    shown.textContent = text;
  }
  thread.appendChild(turn);
}

function submit() {
  if (draft.trim() === "") return;
  sent.push(draft);
  addUserTurn(draft);
  setDraft("", { render: true });
}

if (editor) {
  editor.addEventListener("input", () => {
    if (takes("input")) setDraft(readEditor(), { render: false });
    else renderDraft();
  });
  editor.addEventListener("beforeinput", (event) => {
    const text = typeof event.data === "string" ? event.data : event.dataTransfer?.getData("text/plain");
    if (!["insertText", "insertFromPaste", "insertReplacementText"].includes(event.inputType) || typeof text !== "string") return;
    event.preventDefault();
    if (takes("beforeinput")) setDraft(draft + text, { render: true });
  });
  editor.addEventListener("paste", (event) => {
    event.preventDefault();
    if (takes("paste")) setDraft(draft + event.clipboardData.getData("text/plain"), { render: true });
  });
  editor.addEventListener("keydown", (event) => {
    if (composer.enterSends && event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      submit();
    }
  });
  sendButton?.addEventListener("click", submit);
  setDraft("", { render: true });
}

window.mockChat = {
  /** What the editor would send now (its state, not its DOM). */
  draft: () => draft,
  /** The texts sent from the composer, as the app would post them. */
  sent: () => [...sent],
  /** The user turns the page shows. */
  userTurnCount: () => document.querySelectorAll(composer.userTurnSelector).length,
  /** A user turn already in the page (a conversation reloaded after an earlier send). */
  addUserTurn,
  /** A person's draft, typed into the editor. */
  type(text) {
    editor.focus();
    document.execCommand("insertText", false, text);
  },
  /** What the editor accepts: any of "input", "beforeinput", "paste" (all by default). */
  takes: null,
  /** Asks as a person would (the answer's stream comes from the mock endpoint); returns when the stream ended (ms). */
  async ask(prompt, { html = "", abort = false, holdMs = 600 } = {}) {
    const turn = newTurn();
    writing(true, turn);
    // Long enough for the page's signal to be seen, as a real answer takes seconds.
    const held = new Promise((resolve) => setTimeout(resolve, holdMs));
    const controller = new AbortController();
    const answered = send(prompt, controller.signal);
    if (abort) controller.abort();
    let streamEndedAt = null;
    try {
      const body = await answered;
      streamEndedAt = Date.now();
      leaf = CONFIG.leafFrom(body) || leaf;
    } catch {
      // The app shows what it had; the turn is not final.
    }
    (turn.querySelector(CONFIG.content) || turn).innerHTML = html;
    await held;
    writing(false, turn);
    return streamEndedAt;
  },
};
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>.whitespace-pre-wrap, [contenteditable] {{ white-space: pre-wrap; }}</style>{head}</head>
<body><main id="thread"></main>{composer}<script>{script}</script></body></html>
"""


@dataclass
class Posted:
    """One POST to the app's streaming endpoint."""

    url: str
    headers: dict[str, str]
    body: str


@dataclass
class Answer:
    text: str
    is_cut: bool = False  # the stream ends before the app's end signal
    status: int = 200  # another status answers with ``text`` as an HTML page (a challenge, a login)
    # The 2026 shapes (PLATFORMS.md "Found since"), each where its app has it:
    handoff: bool = False  # ChatGPT: the first response hands off, /resume streams the answer
    retracted: str = ""  # Claude: a block with this text is streamed, then withdrawn
    queued: bool = False  # Gemini: the turn is queued before its answer streams
    # The 2026 ends (PLATFORMS.md "what a finished answer is, in 2026"):
    # Gemini: a title frame and a 1096 error part after the finished candidate, the context token as sparse key "26".
    trailer_1096: bool = False
    # ChatGPT: a moderation event blocks the whole answer; Claude: it ends with stop_reason "refusal".
    withdrawn: bool = False
    # A shape no adapter knows (the app changed its stream): the plugin must read the page instead.
    unknown_format: bool = False


@dataclass
class ChatApp:
    """One mock app. Subclasses give its pages, request and stream shapes."""

    conversation: str
    title: str = "Plan the release"
    has_composer: bool = True
    # Shown where the composer would be when there is none (a challenge page's markup).
    instead_of_composer: str = ""
    posted: list[Posted] = field(default_factory=list)
    answers: deque[Answer] = field(default_factory=deque)
    # Answers a first response handed off, waiting for the request that continues them, and those requests.
    handed_off: deque[tuple[Answer, Posted]] = field(default_factory=deque)
    continued: list[Posted] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)  # the assistant messages streamed, where the app names them
    every_answer: dict[str, Any] = field(default_factory=dict)  # shape options every answer takes (a later version of the app)
    lock: threading.Lock = field(default_factory=threading.Lock)

    name = ""
    origin = ""
    endpoint_path = ""
    continuation_path = ""  # where the page continues an answer its first response handed off
    transport = "fetch"

    # -- what a test uses ----------------------------------------------------

    def install(self, context) -> None:
        context.route(f"{self.origin}/**", self.handle)

    def answer_next(self, text: str, *, is_cut: bool = False, status: int = 200, **shape: Any) -> None:
        with self.lock:
            self.answers.append(Answer(text, is_cut, status, **{**self.every_answer, **shape}))

    def deliveries(self) -> list[Posted]:
        """The POSTs that carried Conductor's results (its text has ``baa-result`` blocks)."""
        with self.lock:
            return [posted for posted in self.posted if "baa-result" in self.delivered_text(posted)]

    # -- serving -------------------------------------------------------------

    def handle(self, route) -> None:
        request = route.request
        path = urlsplit(request.url).path
        if request.method == "GET" and path == urlsplit(self.page_url).path:
            route.fulfill(status=200, content_type="text/html; charset=utf-8", body=self.page())
        elif request.method == "POST" and self.continuation_path and path.endswith(self.continuation_path):
            with self.lock:
                self.continued.append(Posted(url=request.url, headers=dict(request.headers), body=request.post_data or ""))
                handed_off = self.handed_off.popleft() if self.handed_off else None
            if handed_off is None:
                route.fulfill(status=404, content_type="text/plain", body="no answer was handed off")
            else:
                route.fulfill(status=200, content_type=self.stream_type, body=self.continuation(*handed_off))
        elif request.method == "POST" and path.endswith(self.endpoint_path):
            posted = Posted(url=request.url, headers=dict(request.headers), body=request.post_data or "")
            with self.lock:
                self.posted.append(posted)
                answer = self.answers.popleft() if self.answers else Answer("Noted.", **self.every_answer)
            if answer.status != 200:
                route.fulfill(status=answer.status, content_type="text/html; charset=utf-8", body=answer.text)
            elif answer.unknown_format:
                route.fulfill(status=200, content_type=self.stream_type, body=unknown_stream(answer.text))
            else:
                route.fulfill(status=200, content_type=self.stream_type, body=self.stream(answer, posted))
        elif (reply := self.page_value(request.method, request.url)) is not None:
            route.fulfill(status=200, content_type="application/json", body=json.dumps(reply))
        else:
            route.fulfill(status=404, content_type="text/plain", body="not in the mock")

    def page(self) -> str:
        config = json.dumps(self.page_config())
        # The request and leaf functions are JavaScript, spliced in after the JSON.
        config = config[:-1] + ", " + self.page_functions() + ', "continuation": ' + self.page_continuation() + "}"
        script = PAGE_SCRIPT.replace("__CONFIG__", config)
        composer = self.composer_html if self.has_composer else self.instead_of_composer
        return PAGE.format(title=escape(self.title), head=self.page_head(), composer=composer, script=script)

    def page_head(self) -> str:
        return ""

    def page_continuation(self) -> str:
        """JavaScript: the request that continues an answer, given the first response's body, or null."""
        return "(body) => null"

    def page_value(self, method: str, url: str) -> Any:
        """JSON for the app's own look-ups the plugin makes for page values, or None."""
        return None

    # -- per app -------------------------------------------------------------

    stream_type = "text/event-stream; charset=utf-8"
    # The composer's markup, and how the page finds its parts and renders a user turn.
    composer_html = ""
    composer: ClassVar[dict[str, Any]] = {}

    def composer_config(self) -> dict[str, Any] | None:
        return self.composer if self.has_composer else None

    @property
    def page_url(self) -> str:
        raise NotImplementedError

    def page_config(self) -> dict[str, Any]:
        raise NotImplementedError

    def page_functions(self) -> str:
        raise NotImplementedError

    def stream(self, answer: Answer, posted: Posted) -> str:
        raise NotImplementedError

    def continuation(self, answer: Answer, posted: Posted) -> str:
        """The body that continues ``answer``, handed off by the response to ``posted``."""
        raise NotImplementedError

    def delivered_text(self, posted: Posted) -> str:
        raise NotImplementedError


def sse(events: list[tuple[str | None, Any]]) -> str:
    lines = []
    for event, data in events:
        if event:
            lines.append(f"event: {event}")
        lines.append("data: " + (data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))))
        lines.append("")
    return "\n".join(lines) + "\n"


def unknown_stream(text: str) -> str:
    """The answer in a shape from next year: events and keys no adapter knows, the text in them."""
    return sse([("x-turn-begin", {"kind": "turn", "seq": 0})]
               + [("x-turn-chunk", {"kind": "chunk", "payload": piece}) for piece in pieces(text)]
               + [("x-turn-end", {"kind": "end", "seq": 1})])


def pieces(text: str, size: int = 7) -> list[str]:
    return [text[at:at + size] for at in range(0, len(text), size)] or [""]


class Claude(ChatApp):
    name = "claude"
    origin = "https://claude.ai"
    endpoint_path = "/completion"
    organization = "0f6a2b1c-3d4e-4f50-8a6b-7c8d9e0f1a2b"

    @property
    def page_url(self) -> str:
        return f"{self.origin}/chat/{self.conversation}"

    # A ProseMirror editor in a fieldset with its submit button (plugin/adapters/claude/page.js).
    composer_html = (
        '<fieldset><div contenteditable="true" class="ProseMirror" data-testid="chat-input"></div>'
        '<button type="submit" aria-label="Send message" disabled>Send</button></fieldset>'
    )
    composer: ClassVar[dict[str, Any]] = {
        "editor": '[data-testid="chat-input"]', "send": 'fieldset button[type="submit"]',
        "userTurn": '<div data-testid="user-message"><p class="whitespace-pre-wrap"></p></div>',
        "userTurnText": "p", "userTurnSelector": '[data-testid="user-message"]',
    }

    def page_config(self):
        return {
            "composer": self.composer_config(),
            "generating": "attribute",
            "turn": '<div data-is-streaming="false"><div class="font-claude-response"></div></div>',
            "content": ".font-claude-response",
            "leaf": "00000000-0000-4000-8000-000000000000",
            "transport": self.transport,
        }

    def page_functions(self):
        endpoint = f"/api/organizations/{self.organization}/chat_conversations/{self.conversation}/completion"
        return (
            '"request": (prompt, leaf) => ({url: ' + json.dumps(endpoint) + ', headers: {"Content-Type": "application/json",'
            ' "Accept": "text/event-stream"}, body: JSON.stringify({prompt, parent_message_uuid: leaf,'
            ' timezone: "UTC", rendering_mode: "messages", attachments: [], files: []})}),'
            ' "leafFrom": (body) => (body.match(/"uuid":"([0-9a-f-]{36})"/) || [])[1]'
        )

    def stream(self, answer, posted):
        body = json.loads(posted.body)
        events = [("message_start", {"type": "message_start", "message": {
            "uuid": str(uuid.uuid4()), "parent_uuid": str(uuid.uuid4()), "model": "", "content": []}})]
        # A delivery names the ids it wants for its turn (turn_message_uuids), as the web app does.
        preset = body.get("turn_message_uuids") or {}
        if preset.get("assistant_message_uuid"):
            events[0][1]["message"]["uuid"] = preset["assistant_message_uuid"]
        if preset.get("human_message_uuid"):
            events[0][1]["message"]["parent_uuid"] = preset["human_message_uuid"]
        index = 0
        if answer.retracted:
            # A block streamed, then withdrawn from its index on; the answer takes that index again.
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                                 "delta": {"type": "text_delta", "text": piece}})
                       for piece in pieces(answer.retracted)]
            events.append(("content_block_retract", {"type": "content_block_retract", "from_index": index}))
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "text", "text": ""}}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "text_delta", "text": piece}})
                   for piece in pieces(answer.text)]
        if not answer.is_cut:
            ending = {"stop_reason": "refusal", "stop_details": {"type": "refusal"}} if answer.withdrawn else {"stop_reason": "end_turn"}
            events += [
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta", "delta": ending}),
                ("message_stop", {"type": "message_stop"}),
            ]
        return sse(events)

    def delivered_text(self, posted):
        try:
            return json.loads(posted.body).get("prompt", "")
        except ValueError:
            return ""

    def parent_of(self, posted) -> str:
        return json.loads(posted.body)["parent_message_uuid"]

    def conversation_of(self, posted) -> str:
        return urlsplit(posted.url).path.split("/")[5]


class ChatGPT(ChatApp):
    name = "chatgpt"
    origin = "https://chatgpt.com"
    endpoint_path = "/backend-api/f/conversation"
    access_token = "mock-access-token-for-the-page"

    @property
    def page_url(self) -> str:
        return f"{self.origin}/c/{self.conversation}"

    # The ProseMirror #prompt-textarea and the send button (PLATFORMS.md, chrome-ai-bridge 2025-26).
    composer_html = (
        '<div><div contenteditable="true" id="prompt-textarea" class="ProseMirror"></div>'
        '<button data-testid="send-button" id="composer-submit-button" disabled>Send</button></div>'
    )
    composer: ClassVar[dict[str, Any]] = {
        "editor": "#prompt-textarea", "send": '[data-testid="send-button"]',
        "userTurn": '<div data-message-author-role="user" data-message-id=""><div class="whitespace-pre-wrap"></div></div>',
        "userTurnText": ".whitespace-pre-wrap", "userTurnSelector": '[data-message-author-role="user"]',
    }

    def page_config(self):
        return {
            "composer": self.composer_config(),
            "generating": "button",
            "turn": '<div data-message-author-role="assistant" data-message-id=""><div class="markdown"></div></div>',
            "content": ".markdown",
            "leaf": "a1b2c3d0-e5f6-4a7b-8c9d-0e1f2a3b4c50",
            "transport": self.transport,
            "conversation": self.conversation,
        }

    def page_functions(self):
        return (
            '"request": (prompt, leaf) => ({url: "/backend-api/f/conversation", headers: {"Content-Type": "application/json",'
            ' "Accept": "text/event-stream", "Authorization": "Bearer ' + self.access_token + '"}, body: JSON.stringify({action: "next",'
            ' messages: [{id: crypto.randomUUID(), author: {role: "user"}, content: {content_type: "text", parts: [prompt]}, metadata: {}}],'
            ' conversation_id: CONFIG.conversation, parent_message_id: leaf, model: "auto", supported_encodings: ["v1"]})}),'
            ' "leafFrom": (body) => (body.match(/"message":\\{"id":"([0-9a-f-]{36})","author":\\{"role":"assistant"/) || [])[1]'
        )

    continuation_path = "/backend-api/f/conversation/resume"

    def page_continuation(self):
        # The page picks the SSE option of a handoff and posts {conversation_id, offset} to /resume.
        return (
            '(body) => body.includes(\'"type":"stream_handoff"\') && body.includes("resume_sse_endpoint") ? {url:'
            ' "/backend-api/f/conversation/resume", headers: {"Content-Type": "application/json", "Accept": "text/event-stream",'
            ' "Authorization": "Bearer ' + self.access_token + '"}, body: JSON.stringify({conversation_id: CONFIG.conversation,'
            ' offset: 0})} : null'
        )

    def stream(self, answer, posted):
        if answer.handoff:
            with self.lock:
                self.handed_off.append((answer, posted))
            turn = str(uuid.uuid4())
            return sse([
                ("delta_encoding", '"v1"'),
                (None, {"type": "resume_conversation_token", "kind": "topic", "token": "mock.resume.token",
                        "conversation_id": self.conversation}),
                (None, {"type": "stream_handoff", "conversation_id": self.conversation, "turn_exchange_id": turn,
                        "options": [{"type": "resume_sse_endpoint", "topic_id": f"conversation-turn-{turn}"},
                                    {"type": "subscribe_ws_topic", "topic_id": f"conversation-turn-{turn}"}]}),
                (None, "[DONE]"),
            ])
        return self.answer_stream(answer, posted, ends_with_done=True)

    def continuation(self, answer, posted):
        # A resumed body ends with message_stream_complete and no [DONE].
        return self.answer_stream(answer, posted, ends_with_done=False)

    def answer_stream(self, answer, posted, *, ends_with_done):
        body = json.loads(posted.body)
        user = body["messages"][0]
        assistant = str(uuid.uuid4())
        with self.lock:
            self.message_ids.append(assistant)
        message = {"id": assistant, "author": {"role": "assistant"}, "content": {"content_type": "text", "parts": [""]},
                   "status": "in_progress", "metadata": {"parent_id": user["id"]}, "recipient": "all", "channel": "final"}
        events = [("delta_encoding", '"v1"'),
                  ("delta", {"p": "", "o": "add", "v": {"message": message, "conversation_id": self.conversation}})]
        events += [("delta", {"p": "/message/content/parts/0", "o": "append", "v": piece}) for piece in pieces(answer.text)]
        if not answer.is_cut:
            events.append(("delta", {"p": "", "o": "patch", "v": [
                {"p": "/message/status", "o": "replace", "v": "finished_successfully"},
                {"p": "/message/metadata", "o": "append", "v": {"finish_details": {"type": "stop"}}},
            ]}))
            if answer.withdrawn:
                events.append((None, {"type": "moderation", "conversation_id": self.conversation,
                                      "moderation_response": {"blocked": True}}))
            events.append((None, {"type": "message_stream_complete", "conversation_id": self.conversation}))
            if ends_with_done:
                events.append((None, "[DONE]"))
        return sse(events)

    def page_value(self, method, url):
        path = urlsplit(url).path
        if method == "GET" and path == "/api/auth/session":
            return {"accessToken": self.access_token, "expires": "2027-01-01T00:00:00Z"}
        return None

    def delivered_text(self, posted):
        try:
            return json.loads(posted.body)["messages"][0]["content"]["parts"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            return ""

    def parent_of(self, posted) -> str:
        return json.loads(posted.body)["parent_message_id"]

    def conversation_of(self, posted) -> str:
        return json.loads(posted.body)["conversation_id"]


class Gemini(ChatApp):
    name = "gemini"
    origin = "https://gemini.google.com"
    endpoint_path = "/StreamGenerate"
    transport = "xhr"
    stream_type = "application/json+protobuf; charset=utf-8"
    at_token = "AJvLN6Mock:1764400000000"
    build_label = "boq_assistant-bard-web-server_20261125.07_p0"

    @property
    def page_url(self) -> str:
        return f"{self.origin}/app/{self.conversation.removeprefix('c_')}"

    def page_head(self):
        wiz = {"SNlM0e": self.at_token, "cfb2h": self.build_label, "FdrFJe": "-4837261950384756", "TuX5cc": "en"}
        return f"<script>window.WIZ_global_data = {json.dumps(wiz)};</script>"

    # A Quill editor in rich-textarea, sent with Enter (no send button); user
    # turns show one <p> per line, as Gemini's query text does.
    composer_html = '<rich-textarea><div class="ql-editor" contenteditable="true" role="textbox"></div></rich-textarea>'
    composer: ClassVar[dict[str, Any]] = {
        "editor": "rich-textarea .ql-editor", "send": "", "enterSends": True,
        "userTurn": '<user-query><div class="query-text"></div></user-query>', "userTurnText": ".query-text",
        "linePerParagraph": True, "userTurnSelector": "user-query",
    }

    def page_config(self):
        return {
            "composer": self.composer_config(),
            "generating": "mat-icon",
            "turn": "<model-response><message-content><div class=\"markdown\"></div></message-content></model-response>",
            "content": ".markdown",
            "leaf": "",
            "transport": self.transport,
            "conversation": self.conversation,
        }

    def page_functions(self):
        path = "/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate?bl=" + self.build_label + "&rt=c"
        return (
            '"request": (prompt, leaf) => ({url: ' + json.dumps(path) + ', headers: {"Content-Type":'
            ' "application/x-www-form-urlencoded;charset=utf-8", "X-Same-Domain": "1"}, body: new URLSearchParams({"f.req":'
            ' JSON.stringify([null, JSON.stringify([[prompt, 0, null, null, null, null, 0], ["en"], [CONFIG.conversation, leaf,'
            ' null]])]), at: window.WIZ_global_data.SNlM0e}).toString()}),'
            ' "leafFrom": (body) => (body.match(/\\\\"(r_[0-9a-f]+)\\\\"/) || [])[1]'
        )

    def stream(self, answer, posted):
        rid, rcid = f"r_{uuid.uuid4().hex[:16]}", f"rc_{uuid.uuid4().hex[:16]}"
        frames = []
        shown = ""
        if answer.queued:
            # A status list without an error code: queued (gemini_webapi, 2026).
            frames += [[["wrb.fr", None, None, None, None, [7]]]] * 2
        for piece in pieces(answer.text, 40):
            shown += piece
            candidate = [rcid, [shown], None, None, None, None, None, None, [1]]
            frames.append([["wrb.fr", None, json.dumps([None, [self.conversation, rid], None, None, [candidate]])]])
        if not answer.is_cut:
            final = [None, [self.conversation, rid], None, None, [[rcid, [answer.text], None, None, None, None, None, None, [2]]]]
            token = "!MockContextToken_" + rid
            final += [{"26": token}] if answer.trailer_1096 else [None] * 20 + [token]
            frames.append([["wrb.fr", None, json.dumps(final)]])
        if answer.trailer_1096:
            title = [None, [self.conversation, rid], {"11": [self.title], "44": True}]
            error = [3, None, [["type.googleapis.com/assistant.boq.bard.application.BardErrorInfo", [1096]]]]
            frames += [[["wrb.fr", None, json.dumps(title)]], [["wrb.fr", None, None, None, None, error]]]
        out = [")]}'\n"]
        for envelope in frames:
            frame = json.dumps(envelope)
            # The length counts the UTF-16 units of "\n" + JSON + "\n" (gemini_webapi, 2026).
            units = len(("\n" + frame + "\n").encode("utf-16-le")) // 2
            out.append(f"\n{units}\n{frame}")
        return "".join(out) + "\n"

    def form(self, posted):
        return parse_qs(posted.body)

    def inner(self, posted):
        return json.loads(json.loads(self.form(posted)["f.req"][0])[1])

    def delivered_text(self, posted):
        try:
            return self.inner(posted)[0][0]
        except (ValueError, KeyError, IndexError, TypeError):
            return ""

    def parent_of(self, posted) -> str:
        return self.inner(posted)[2][1]

    def conversation_of(self, posted) -> str:
        return self.inner(posted)[2][0]


APPS = {app.name: app for app in (Claude, ChatGPT, Gemini)}
CONVERSATIONS = {
    "claude": "3f1e2d4c-5b6a-4978-8c9d-0a1b2c3d4e5f",
    "chatgpt": "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718",
    "gemini": "c_4f2a9e7b1c3d5e6f",
}


def chat_app(name: str, **options: Any) -> ChatApp:
    return APPS[name](conversation=CONVERSATIONS[name], **options)
