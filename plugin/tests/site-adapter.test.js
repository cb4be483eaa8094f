// The generic page adapter (adapters/site.js) for each shipped description,
// on pages built from the description's own first selectors (fake-dom.js):
// finished answer found, streaming not taken as final, the ```baa block read
// exactly, the composer filled and sent, the delivered turn seen.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { siteAdapter } from "../adapters/site.js";
import { deliverThroughComposer } from "../lib/composer.js";
import { elementToMarkdown } from "../lib/markdown.js";
import { SITE_NAMES } from "../sites/index.js";
import { el, fakeDocument } from "./fake-dom.js";

const read = async (name) => JSON.parse(readFileSync(new URL(`../sites/${name}.json`, import.meta.url), "utf8"));
const adapters = await Promise.all(SITE_NAMES.map(async (name) => siteAdapter(await read(name))));
const BAA = "files.list\n{\"path\": \"/tmp\"}";

/** A page of `adapter`'s site: one finished (or streaming) answer holding a baa block, a composer, user turns. */
function page(adapter, { isStreaming = false } = {}) {
  const s = adapter.dom.selectors;
  const code = el("code", { class: "language-baa" }, BAA);
  const text = el("div", {}, el("p", {}, "Listing it:"), el("pre", {}, code));
  const finished = el("div", {});
  const turn = el("div", {}, text, finished);
  const userTurns = [];
  const composer = { nodeName: "TEXTAREA", value: "", focus() { this.focused = true; }, setSelectionRange() {}, select() {}, dispatchEvent: () => true, getAttribute: () => null };
  if (adapter.dom.composerKind !== "textarea") composer.getAttribute = (name) => (name === "contenteditable" ? "true" : null);
  const send = {
    disabled: false,
    getAttribute: () => null,
    click() {
      const userTurn = el("div", {}, composer.value);
      userTurn.querySelectorAll = () => []; // no user_turn_text inside: the turn's own text is read
      userTurns.push(userTurn);
      composer.value = "";
    },
  };
  const table = () => ({
    [s.assistantTurn[0]]: [turn],
    ...(s.assistantText[0] ? { [s.assistantText[0]]: [text] } : {}),
    ...(s.finished[0] && !isStreaming ? { [s.finished[0]]: [finished] } : {}),
    ...(isStreaming ? { [s.generating[0]]: [el("button")] } : {}),
    [s.composer[0]]: [composer],
    ...(s.sendButton[0] ? { [s.sendButton[0]]: [send] } : {}),
    [s.userTurn[0]]: userTurns,
  });
  const document = fakeDocument(table());
  document.querySelectorAll = (selector) => table()[selector] ?? [];
  document.execCommand = (command, _ui, value) => {
    if (command === "insertText" && composer.focused) composer.value += value;
    if (command === "delete") composer.value = "";
    return true;
  };
  turn.querySelectorAll = (selector) => (selector === s.assistantText[0] ? [text] : selector === s.finished[0] && !isStreaming ? [finished] : []);
  return { document, userTurns };
}

describe("a conversation id in a query parameter", () => {
  const openrouter = adapters.find((adapter) => adapter.name === "openrouter");

  it("is read from the parameter on the prefix's own page, and the page built back with it", () => {
    const room = "orc-1780634365-MCz7i1oIfBu94tWR8LDt";
    assert.equal(openrouter.conversationIdFromUrl(`https://openrouter.ai/chat?room=${room}`), room);
    assert.equal(openrouter.conversationIdFromUrl(`https://openrouter.ai/chat/?room=${room}&models=x`), room);
    assert.equal(openrouter.conversationUrl({ conversation_id: room }), `https://openrouter.ai/chat?room=${room}`);
  });

  it("is not read from another page, a missing or malformed parameter, or the path", () => {
    for (const url of [
      "https://openrouter.ai/chat",
      "https://openrouter.ai/chat?room=",
      "https://openrouter.ai/chat?room=a%20b%20c%20d",
      "https://openrouter.ai/models?room=orc-1780634365-MCz7i1oIfBu94tWR8LDt",
      "https://openrouter.ai/chat/orc-1780634365-MCz7i1oIfBu94tWR8LDt",
    ]) assert.equal(openrouter.conversationIdFromUrl(url), null, url);
  });
});

describe("site adapters", () => {
  it("are built for every shipped description, with the adapter interface and no stream or request", () => {
    assert.deepEqual(adapters.map((adapter) => adapter.name), SITE_NAMES);
    for (const adapter of adapters) {
      assert.equal(adapter.completionRequest.pattern.test(`${adapter.origins[0]}/api/chat`), false);
      assert.deepEqual(adapter.deliveryRequests, []);
      assert.equal(adapter.createStreamParser({ requestUrl: "" }).finish(), null);
    }
  });

  it("refuse an invalid description", () => {
    assert.throws(() => siteAdapter({ name: "x" }), { name: "InvalidSiteDescription" });
  });

  for (const adapter of adapters) {
    it(`${adapter.name}: a finished answer is found and its baa block read exactly`, () => {
      const { document } = page(adapter);
      assert.equal(adapter.dom.isGenerating(document), false);
      const answer = adapter.dom.lastAssistantMessage(document);
      assert.ok(answer);
      assert.ok(elementToMarkdown(answer).includes("```baa\n" + BAA + "\n```"), elementToMarkdown(answer));
    });

    it(`${adapter.name}: an answer still streaming is not taken as final`, () => {
      const { document } = page(adapter, { isStreaming: true });
      assert.equal(adapter.dom.isGenerating(document), true);
      assert.equal(adapter.dom.lastAssistantMessage(document), null);
    });

    it(`${adapter.name}: tells the turn watch what the page shows`, () => {
      const finished = adapter.dom.turnLook(page(adapter).document);
      assert.equal(finished.isStreaming, false);
      assert.ok(finished.turn);
      assert.ok(finished.text.includes("Listing it:"));
      assert.equal(finished.isFinishedShown, true);
      const streaming = adapter.dom.turnLook(page(adapter, { isStreaming: true }).document);
      assert.equal(streaming.isStreaming, true);
      assert.equal(streaming.isFinishedShown, adapter.dom.selectors.finished.length === 0);
    });

    it(`${adapter.name}: the composer is filled and sent, and the delivered turn seen`, async () => {
      const { document, userTurns } = page(adapter);
      const result = await deliverThroughComposer({ document, table: adapter.dom.selectors, text: "results", timeoutMs: 3_000 });
      assert.deepEqual(result, { ok: true, error: null, error_code: null, evidence: { user_turn_seen: true } });
      assert.equal(userTurns.length, 1);
    });

    it(`${adapter.name}: reads the conversation id from its own page URLs only`, () => {
      const { origins, conversation } = adapter.description;
      const id = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
      // The id as the path's last segment, or as the description's query parameter (OpenRouter's ?room=).
      const [prefix] = conversation.path_prefixes;
      const at = (path) => (conversation.query ? `${path.replace(/\/$/, "")}?${conversation.query}=${id}` : `${path}${id}`);
      assert.equal(adapter.conversationIdFromUrl(`${origins[0]}${at(prefix)}`), id);
      assert.equal(adapter.conversationIdFromUrl(`https://evil.example${at(prefix)}`), null);
      assert.equal(adapter.conversationIdFromUrl(`${origins[0]}${at("/elsewhere/")}`), null);
      assert.equal(adapter.conversationUrl({ conversation_id: id }), `${origins[0]}${at(prefix)}`);
    });
  }
});
