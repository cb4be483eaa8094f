"""Mock pages of the chat sites read from the page (``plugin/sites/<name>.json``), at their real origins.

Each page has the DOM shape its description names: assistant turns (and
their text element), the "still writing" signal, the composer of the
description's kind, its send button and the person's turns. The site's
network is not mocked (the plugin watches none of it): a test makes the
page write an answer (``mockSite.answer(html)``: the signal shown while the
turn fills, then gone) and reads what the plugin typed and sent
(``mockSite.sent()``). Served through Playwright's ``context.route``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from html import escape

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title></head>
<body><main id="thread"></main>{composer}
<script>
const SITE = {config};
const thread = document.getElementById("thread");
const sent = [];

function fromHtml(html) {{
  const holder = document.createElement("div");
  holder.innerHTML = html;
  return holder.firstElementChild;
}}

function writing(isWriting) {{
  if (SITE.streaming_attribute) {{
    const [selector, name, on, off] = SITE.streaming_attribute;
    document.querySelector(selector).setAttribute(name, isWriting ? on : off);
    return;
  }}
  const marker = document.getElementById("mock-streaming");
  const holder = SITE.streaming_in ? document.querySelector(SITE.streaming_in) : document.body;
  if (isWriting && !marker) holder.appendChild(fromHtml(SITE.streaming));
  else if (!isWriting && marker) marker.remove();
}}

function composerText() {{
  const input = document.querySelector(SITE.input);
  return input.nodeName === "TEXTAREA" ? input.value : input.innerText;
}}

function clearComposer() {{
  const input = document.querySelector(SITE.input);
  if (input.nodeName === "TEXTAREA") input.value = "";
  else input.replaceChildren();
}}

document.querySelector(SITE.send).addEventListener("click", () => {{
  if (SITE.streaming_attribute && document.querySelector(SITE.send).getAttribute("aria-label") === "Stop") return;
  const text = composerText();
  if (!text.trim()) return;
  sent.push(text);
  const turn = fromHtml(SITE.user_turn);
  (SITE.user_text_in_turn ? turn.querySelector(SITE.user_text_in_turn) : turn).textContent = text;
  thread.appendChild(turn);
  clearComposer();
}});

window.mockSite = {{
  /** Writes an answer: the streaming signal for `ms`, a first part, then the whole and the signal gone. */
  answer(html, ms = 1200) {{
    const turn = fromHtml(SITE.turn);
    const text = SITE.text_in_turn ? turn.querySelector(SITE.text_in_turn) : turn;
    writing(true);
    text.innerHTML = "<p>Let me check…</p>";
    thread.appendChild(turn);
    return new Promise((resolve) => setTimeout(() => {{
      text.innerHTML = html;
      // The action bar shows once the answer is finished.
      if (SITE.finished) turn.appendChild(fromHtml(SITE.finished));
      writing(false);
      resolve();
    }}, ms));
  }},
  sent: () => [...sent],
  userTurnCount: () => document.querySelectorAll(SITE.user_turn_selector).length,
}};
</script></body></html>
"""


def generic_code(language: str, lines: list[str]) -> str:
    return f'<pre><code class="language-{language}">' + escape("\n".join(lines) + "\n", quote=False) + "</code></pre>"


def aistudio_code(language: str, lines: list[str]) -> str:
    """AI Studio's ms-code-block: the language in data-test-language, a panel header (label, copy), the code in pre code."""
    spans = "\n".join(f'<span class="hljs-string">{escape(line, quote=False)}</span>' for line in lines)
    return (
        f'<ms-code-block data-test-language="{language}"><mat-expansion-panel class="mat-expansion-panel">'
        f'<mat-expansion-panel-header class="mat-expansion-panel-header"><span class="mat-content"><mat-icon>code</mat-icon>'
        f'<span>{language}</span></span><button aria-label="Copy to clipboard"><span>content_copy</span></button>'
        f'</mat-expansion-panel-header><div class="mat-expansion-panel-content"><div class="mat-expansion-panel-body">'
        f'<pre><code>{spans}</code></pre></div></div></mat-expansion-panel></ms-code-block>'
    )


def qwen_code(language: str, lines: list[str]) -> str:
    """Qwen's pre.qwen-markdown-code: a header (language, Copy), the lines in a Monaco editor (no-break spaces), line numbers beside."""
    numbers = "".join(f'<div class="line-numbers">{n}</div>' for n in range(1, len(lines) + 1))
    view_lines = "".join(
        f'<div class="view-line"><span><span class="mtk1">{escape(line, quote=False).replace(" ", "&nbsp;")}</span></span></div>'
        for line in lines
    )
    return (
        f'<pre class="qwen-markdown-code"><div class="qwen-markdown-code-header"><div>{language}</div>'
        f'<div class="qwen-markdown-code-header-actions"><div class="qwen-markdown-code-header-action-item">Copy</div></div></div>'
        f'<div class="qwen-markdown-code-body {language}"><div class="monaco-editor"><div class="margin">{numbers}</div>'
        f'<div class="view-lines">{view_lines}</div></div></div></pre>'
    )


CODE_BLOCKS = {"generic": generic_code, "aistudio": aistudio_code, "qwen": qwen_code}


@dataclass
class SiteApp:
    """One site's mock: its description's name, a conversation page, and the markup of each part."""

    name: str
    origin: str
    path_prefix: str
    conversation: str
    turn: str  # an assistant turn; its text element, when the site has one, inside
    text_in_turn: str  # the selector of the text element inside a turn, or "" for the turn itself
    streaming: str  # the "still writing" marker, added while writing (id="mock-streaming")
    input: str  # the composer's selector, and its markup in ``composer``
    send: str
    composer: str
    user_turn: str
    user_turn_selector: str
    # Sites whose send button turns into the stop button: (selector, attribute, while writing, otherwise).
    streaming_attribute: tuple[str, str, str, str] | None = None
    title: str = "Plan the release"
    user_text_in_turn: str = ""  # where the person's text goes inside ``user_turn``, "" for the turn itself
    streaming_in: str = ""  # where the "still writing" marker goes (the composer's form, a toolbar), "" for the body
    finished: str = ""  # markup added to the turn once it is finished (its action bar), "" for none
    # How the site renders a code block: "generic" (pre > code.language-*), or the site's own shape (``code_block``).
    code_shape: str = "generic"

    def answer_html(self, language: str, lines: list[str]) -> str:
        """An answer "Checking:" and one code block, in the markup the site renders code blocks with."""
        return "<p>Checking:</p>" + CODE_BLOCKS[self.code_shape](language, lines)

    @property
    def page_url(self) -> str:
        return f"{self.origin}{self.path_prefix}{self.conversation}"

    def install(self, context) -> None:
        context.route(f"{self.origin}/**", self.handle)

    def handle(self, route) -> None:
        if route.request.method == "GET" and route.request.url.split("?")[0] == self.page_url:
            route.fulfill(status=200, content_type="text/html; charset=utf-8", body=self.page())
        else:
            route.fulfill(status=404, content_type="text/plain", body="not in the mock")

    def page(self) -> str:
        config = {
            "turn": self.turn, "text_in_turn": self.text_in_turn, "streaming": self.streaming, "input": self.input,
            "send": self.send, "user_turn": self.user_turn, "user_turn_selector": self.user_turn_selector,
            "streaming_attribute": self.streaming_attribute, "user_text_in_turn": self.user_text_in_turn,
            "streaming_in": self.streaming_in, "finished": self.finished,
        }
        # No markup here holds "</script", so the JSON cannot close the script.
        return PAGE.format(title=escape(self.title), composer=self.composer, config=json.dumps(config))


def site_app(name: str, **changes) -> SiteApp:
    """The mock of site ``name``, its markup from the first selectors of ``plugin/sites/<name>.json``."""
    conversation = str(uuid.uuid4())
    apps = {
        "perplexity": SiteApp(
            name="perplexity", origin="https://www.perplexity.ai", path_prefix="/search/",
            conversation=f"plan-the-release-{uuid.uuid4().hex[:12]}",
            turn='<div class="max-w-threadContentWidth"><div class="prose"></div></div>', text_in_turn=".prose",
            streaming='<button id="mock-streaming" aria-label="Stop generating response">Stop</button>',
            input="#ask-input", send='button[aria-label="Submit"]',
            composer='<div id="ask-input" contenteditable="true" data-lexical-editor="true"></div>'
                     '<button type="button" aria-label="Submit">Submit</button>',
            user_turn='<div class="group/query" style="white-space: pre-wrap"></div>',
            user_turn_selector='div[class*="group/query"]',
        ),
        "deepseek": SiteApp(
            name="deepseek", origin="https://chat.deepseek.com", path_prefix="/a/chat/s/", conversation=conversation,
            turn='<div class="_4f9bf79"><div class="ds-message"><div class="ds-markdown"></div></div></div>',
            text_in_turn=".ds-markdown",
            finished='<div class="_0a3d93b"><div class="ds-flex" style="align-items: center; gap: 16px;">'
                     '<div class="ds-icon-button" role="button">Copy</div></div></div>',
            # DeepSeek's send button only changes its icon while it writes, in markup the description does not
            # know (its streaming selector is a guess): the answer is read by the quiet rule and the action bar.
            streaming="", streaming_attribute=("div.ds-send-button", "data-icon", "stop", "send"),
            input="textarea#chat-input", send="div.ds-send-button",
            composer='<textarea id="chat-input" placeholder="Message DeepSeek"></textarea>'
                     '<div class="ds-send-button" role="button" aria-label="Send">Send</div>',
            user_turn='<div class="_9663006" style="white-space: pre-wrap"></div>', user_turn_selector="div._9663006",
        ),
        "copilot": SiteApp(
            name="copilot", origin="https://github.com", path_prefix="/copilot/c/", conversation=conversation,
            turn='<div class="message-container ChatMessage-module__ai--a1b2">'
                 '<div class="markdown-body" data-copilot-markdown="true"></div></div>',
            text_in_turn=".markdown-body",
            # The stop icon in the input toolbar; the action bar inside the turn once finished.
            streaming='<svg id="mock-streaming" class="octicon octicon-square-fill" viewBox="0 0 16 16"></svg>',
            finished='<div data-testid="nonshared-toolbar"><button type="button">Copy</button></div>',
            input="#copilot-chat-textarea", send='button[aria-labelledby*="Send"]',
            composer='<textarea id="copilot-chat-textarea" placeholder="How can I help?"></textarea>'
                     '<button type="button" aria-labelledby="SendButton-label"><span id="SendButton-label">Send</span></button>',
            user_turn='<div class="UserMessage-module__container--c3d4" style="white-space: pre-wrap"></div>',
            user_turn_selector='[class*="UserMessage-module__container"]',
        ),
        "mistral": SiteApp(
            name="mistral", origin="https://chat.mistral.ai", path_prefix="/chat/", conversation=conversation,
            turn='<div data-message-author-role="assistant"><div><div data-message-part-type="answer"></div></div></div>',
            text_in_turn='div[data-message-part-type="answer"]',
            # The stop icon's square in the composer's form while it writes; the action bar three divs deep once finished.
            streaming='<svg id="mock-streaming" viewBox="0 0 24 24"><rect rx="2" width="12" height="12"></rect></svg>',
            streaming_in="form",
            finished='<div><div><div class="actions"><button type="button">Copy</button></div></div></div>',
            input='div.ProseMirror[contenteditable="true"]', send='button[type="submit"]',
            composer='<form onsubmit="return false"><div class="ProseMirror" contenteditable="true"></div>'
                     '<button type="submit">Send</button></form>',
            user_turn='<div data-message-author-role="user" style="white-space: pre-wrap"></div>',
            user_turn_selector='div[data-message-author-role="user"]',
        ),
        "aistudio": SiteApp(
            name="aistudio", origin="https://aistudio.google.com", path_prefix="/prompts/",
            conversation=f"1{uuid.uuid4().hex[:20]}",
            turn='<ms-chat-turn><div data-turn-role="Model"><ms-text-chunk></ms-text-chunk></div></ms-chat-turn>',
            text_in_turn="ms-text-chunk",
            streaming='<button id="mock-streaming" aria-label="Stop">Stop</button>',
            input='textarea[aria-label="Enter a prompt"]', send='ms-run-button button[type="submit"]',
            composer='<textarea aria-label="Enter a prompt"></textarea>'
                     '<ms-run-button><button type="submit">Run</button></ms-run-button>',
            user_turn='<ms-chat-turn><div data-turn-role="User"><ms-text-chunk style="white-space: pre-wrap"></ms-text-chunk></div></ms-chat-turn>',
            user_turn_selector='ms-chat-turn [data-turn-role="User"]', user_text_in_turn="ms-text-chunk",
            code_shape="aistudio",
        ),
        "qwen": SiteApp(
            name="qwen", origin="https://chat.qwen.ai", path_prefix="/c/", conversation=conversation,
            turn='<div class="qwen-chat-message-assistant"><div class="response-message-content"></div></div>',
            text_in_turn=".response-message-content",
            streaming='<i id="mock-streaming" class="icon-StopIcon"></i>',
            input="textarea.message-input-textarea", send="div.message-input-right-button-send button",
            composer='<textarea class="message-input-textarea"></textarea>'
                     '<div class="message-input-right-button-send"><button type="button">Send</button></div>',
            user_turn='<div class="user-message-content" style="white-space: pre-wrap"></div>',
            user_turn_selector="div.user-message-content", code_shape="qwen",
        ),
    }
    app = apps[name]
    return SiteApp(**{**app.__dict__, **changes}) if changes else app
