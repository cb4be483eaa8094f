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
<body><main id="thread"{thread_attributes}></main>{composer}
<script>
const SITE = {config};
const thread = document.getElementById("thread");
const sent = [];

function fromHtml(html) {{
  const holder = document.createElement("div");
  holder.innerHTML = html;
  return holder.firstElementChild;
}}

let swapped = null;  // the element a "writing" marker stands in for (the send button), while it writes

function writing(isWriting) {{
  if (SITE.streaming_swap) {{
    const [selector, html] = SITE.streaming_swap;
    if (isWriting && !swapped) {{
      swapped = document.querySelector(selector);
      swapped.replaceWith(fromHtml(html));
    }} else if (!isWriting && swapped) {{
      document.getElementById("mock-streaming").replaceWith(swapped);
      swapped = null;
    }}
    return;
  }}
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


def t3chat_code(language: str, lines: list[str]) -> str:
    """T3 Chat's code block: a header with the language in a .font-mono label, then pre.shiki.not-prose > code, a
    span.line a line (Microck/t3-chat-zipper's T3 enhancer reads the label from the pre's parent, the code from its code)."""
    spans = "\n".join(f'<span class="line"><span style="color:#9ECBFF">{escape(line, quote=False)}</span></span>' for line in lines)
    return (
        f'<div class="relative mt-2 flex w-full flex-col"><div class="flex items-center justify-between rounded-t px-4 py-2">'
        f'<span class="font-mono text-xs">{language}</span><button type="button">Copy</button></div>'
        f'<pre class="shiki not-prose" tabindex="0"><code>{spans}</code></pre></div>'
    )


def zai_code(language: str, lines: list[str]) -> str:
    """Z.ai's code block, Open WebUI's CodeBlock: the language as a label and as the editor wrapper's language-* class,
    Copy in a sticky bar, the lines in CodeMirror's .cm-content .cm-line (CodeWebChat reads the code from .cm-line)."""
    cm_lines = "".join(f'<div class="cm-line">{escape(line, quote=False)}</div>' for line in lines)
    return (
        f'<div><div class="relative my-2 flex flex-col rounded-lg" dir="ltr">'
        f'<div class="text-text-300 absolute pl-4 py-1.5 text-xs font-medium">{language}</div>'
        f'<div class="sticky top-8 mb-1 py-1 pr-2.5 flex items-center justify-end z-10 text-xs"><div class="flex items-center gap-0.5">'
        f'<button class="copy-code-button bg-none border-none">Copy</button></div></div>'
        f'<div class="language-{language} rounded-t-lg -mt-8 rounded-b-lg overflow-hidden"><div class="pt-7"></div>'
        f'<div class="cm-editor"><div class="cm-scroller"><div class="cm-content" role="textbox">{cm_lines}</div></div></div>'
        f'</div></div></div>'
    )


CODE_BLOCKS = {"generic": generic_code, "aistudio": aistudio_code, "qwen": qwen_code, "t3chat": t3chat_code, "zai": zai_code}


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
    # Sites whose send button is replaced while writing: (its selector, the markup in its place, id="mock-streaming").
    streaming_swap: tuple[str, str] | None = None
    # The conversation in a query parameter of the prefix's page (OpenRouter's ?room=), "" for the path's last segment.
    query: str = ""
    thread_attributes: str = ""  # attributes of the element the turns are in (T3 Chat's role="log")
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
        if self.query:
            return f"{self.origin}{self.path_prefix.rstrip('/')}?{self.query}={self.conversation}"
        return f"{self.origin}{self.path_prefix}{self.conversation}"

    def install(self, context) -> None:
        context.route(f"{self.origin}/**", self.handle)

    def handle(self, route) -> None:
        url = route.request.url if self.query else route.request.url.split("?")[0]
        if route.request.method == "GET" and url == self.page_url:
            route.fulfill(status=200, content_type="text/html; charset=utf-8", body=self.page())
        else:
            route.fulfill(status=404, content_type="text/plain", body="not in the mock")

    def page(self) -> str:
        config = {
            "turn": self.turn, "text_in_turn": self.text_in_turn, "streaming": self.streaming, "input": self.input,
            "send": self.send, "user_turn": self.user_turn, "user_turn_selector": self.user_turn_selector,
            "streaming_attribute": self.streaming_attribute, "user_text_in_turn": self.user_text_in_turn,
            "streaming_in": self.streaming_in, "finished": self.finished, "streaming_swap": self.streaming_swap,
        }
        # No markup here holds "</script", so the JSON cannot close the script.
        return PAGE.format(
            title=escape(self.title), composer=self.composer, config=json.dumps(config),
            thread_attributes=self.thread_attributes,
        )


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
        "grok": SiteApp(
            # discovery-oasis's grok.js (2025-11): each turn a .relative.group.flex row, items-start for Grok's and
            # items-end for the person's, the text in .response-content-markdown; AI-Multiverse (2026-02): the tiptap
            # composer and its Submit button. The stop button's label is the description's guess (no source has it).
            name="grok", origin="https://grok.com", path_prefix="/c/", conversation=conversation,
            turn='<div class="relative group flex flex-col items-start"><div class="response-content-markdown"></div></div>',
            text_in_turn=".response-content-markdown",
            streaming='<button id="mock-streaming" type="button" aria-label="Stop model response">Stop</button>',
            streaming_in="form",
            input='div.tiptap.ProseMirror[contenteditable="true"]', send='button[type="submit"][aria-label="Submit"]',
            composer='<form onsubmit="return false"><div class="tiptap ProseMirror" contenteditable="true"></div>'
                     '<button type="submit" aria-label="Submit">Submit</button></form>',
            user_turn='<div class="relative group flex flex-col items-end"><div class="response-content-markdown" '
                      'style="white-space: pre-wrap"></div></div>',
            user_turn_selector=".relative.group.flex.items-end", user_text_in_turn=".response-content-markdown",
        ),
        "kimi": SiteApp(
            # MCP-SuperAssistant's kimi adapter (2026-01): div.segment.segment-assistant with its text in
            # .markdown-container .markdown, the action bar .segment-assistant-actions once finished, the Lexical
            # composer .chat-input-editor and its .send-button-container, whose class gains "stop" while it writes.
            name="kimi", origin="https://www.kimi.com", path_prefix="/chat/",
            conversation=f"d{uuid.uuid4().hex[:19]}",
            turn='<div class="segment segment-assistant"><div class="markdown-container"><div class="markdown"></div>'
                 '</div></div>',
            text_in_turn=".markdown-container .markdown",
            finished='<div class="segment-assistant-actions"><button type="button">Copy</button></div>',
            streaming="", streaming_attribute=(
                "div.send-button-container", "class", "send-button-container stop", "send-button-container",
            ),
            input='.chat-input-editor[contenteditable="true"]', send=".send-button-container .send-button",
            composer='<div class="chat-input-editor" contenteditable="true" data-lexical-editor="true"></div>'
                     '<div class="send-button-container"><div class="send-button" role="button">Send</div></div>',
            user_turn='<div class="segment segment-user"><div class="user-content" style="white-space: pre-wrap"></div></div>',
            user_turn_selector="div.segment.segment-user", user_text_in_turn=".user-content",
        ),
        # The three below are built from their sources (named in each), not from the descriptions under test.
        "t3chat": SiteApp(
            # Microck/t3-chat-zipper (2025-11): the turns in [role="log"][aria-label="Chat messages"], each a
            # div.flex.justify-start (or justify-end) row holding div[aria-label="Assistant message"] and, once
            # finished, its action bar whose copy button has a lucide-copy icon.
            name="t3chat", origin="https://t3.chat", path_prefix="/chat/", conversation=conversation,
            thread_attributes=' role="log" aria-label="Chat messages"',
            turn='<div class="flex justify-start"><div role="article" aria-label="Assistant message" '
                 'class="group relative w-full max-w-full break-words"></div></div>',
            text_in_turn='div[aria-label="Assistant message"]',
            finished='<div class="flex items-center gap-1"><button type="button" aria-label="Copy response">'
                     '<svg class="lucide lucide-copy" viewBox="0 0 24 24"></svg></button></div>',
            # No source says how T3 Chat shows that it writes: the mock's marker is one no description names, so
            # the answer is read by the quiet rule and the action bar.
            streaming='<div id="mock-streaming" class="t3-writing-indicator"></div>',
            input="textarea#chat-input", send='button[type="submit"]',
            composer='<form onsubmit="return false"><textarea id="chat-input" placeholder="Type your message here...">'
                     '</textarea><button type="submit" aria-label="Send message">Send</button></form>',
            user_turn='<div class="flex justify-end"><div aria-label="Your message" style="white-space: pre-wrap"></div></div>',
            user_turn_selector='div[aria-label="Your message"]', user_text_in_turn='div[aria-label="Your message"]',
            code_shape="t3chat",
        ),
        "openrouter": SiteApp(
            # CodeWebChat's openrouter.ts (2026-08): a spinning element while it writes, the answer in
            # div[data-testid="assistant-message"] whose last child holds the action bar (its copy button's icon
            # path M15.666 3.888…); MCP-SuperAssistant (2026-01): the composer and the person's turn.
            name="openrouter", origin="https://openrouter.ai", path_prefix="/chat/", query="room",
            conversation=f"orc-1780634365-{uuid.uuid4().hex[:20]}",
            turn='<div data-testid="assistant-message"><div class="mock-answer"></div></div>', text_in_turn=".mock-answer",
            finished='<div><div class="flex items-center gap-1"><button type="button"><svg viewBox="0 0 24 24">'
                     '<path d="M15.666 3.888A2.25 2.25 0 0 0 13.5 2.25h-3c-1.03 0-1.9.693-2.166 1.638"></path>'
                     '</svg></button></div></div>',
            streaming='<svg id="mock-streaming" class="animate-spin" viewBox="0 0 24 24"></svg>',
            input='textarea[data-testid="composer-input"]', send='button[data-testid="send-button"]',
            composer='<textarea data-testid="composer-input" placeholder="Start a new message..."></textarea>'
                     '<button type="button" data-testid="send-button" aria-label="Send message">Send</button>',
            user_turn='<div data-testid="user-message" style="white-space: pre-wrap"></div>',
            user_turn_selector='div[data-testid="user-message"]',
        ),
        "zai": SiteApp(
            # CodeWebChat's z-ai.ts (2026-08): writing while #send-message-button is gone (a stop button in its
            # place), the answer div.chat-assistant followed by its action bar with button.copy-response-button;
            # MCP-SuperAssistant: #chat-input, div.chat-user; code blocks as Open WebUI renders them.
            name="zai", origin="https://chat.z.ai", path_prefix="/c/", conversation=conversation,
            turn='<div class="flex w-full"><div class="chat-assistant w-full min-w-full markdown-prose"></div></div>',
            text_in_turn=".chat-assistant",
            finished='<div class="flex justify-start overflow-x-auto buttons"><button class="copy-response-button '
                     'visible rounded-lg p-1.5">Copy</button></div>',
            streaming="", streaming_swap=(
                "#send-message-button", '<button id="mock-streaming" type="button" class="rounded-full p-1.5">Stop</button>',
            ),
            input="#chat-input", send="#send-message-button",
            composer='<form class="w-full flex gap-1.5" onsubmit="return false"><textarea id="chat-input"></textarea>'
                     '<button id="send-message-button" type="submit">Send</button></form>',
            user_turn='<div class="chat-user" style="white-space: pre-wrap"></div>', user_turn_selector="div.chat-user",
            code_shape="zai",
        ),
    }
    app = apps[name]
    return SiteApp(**{**app.__dict__, **changes}) if changes else app
