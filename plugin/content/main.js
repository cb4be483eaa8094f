/**
 * The isolated-world side of a chat page: picks the page's adapter, reads
 * final assistant messages (the app's stream through the MAIN-world hook
 * first, the page as the fallback) and performs proxy deliveries (a request
 * from the page) and DOM deliveries (the composer) for the service worker;
 * puts the tool guide into the composer, unsent (the popup's button, and the
 * option that gives every new chat its guide). Holds no secret: the token
 * never reaches a content script.
 */

import { adapterForUrl, NETWORK_ADAPTERS } from "../adapters/index.js";
import { isSitePage, siteAdapter } from "../adapters/site.js";
import { CaptureTracker } from "../lib/capture.js";
import { deliverThroughComposer, fillComposer } from "../lib/composer.js";
import { deliveryRequestRefusal, tabRefusal } from "../lib/delivery-rules.js";
import { NewChatGuide } from "../lib/guide.js";
import { elementToMarkdown } from "../lib/markdown.js";
import { fillPageValues, MissingPageValue, placeholderNames } from "../lib/placeholders.js";
import { proxyErrorCode } from "../lib/proxy.js";
import { showReplyNote } from "../lib/reply-note.js";
import { quietMsOf, TurnWatch } from "../lib/turn-watch.js";

/** How often, at most, the page is looked at while it changes. */
const DOM_CHECK_MS = 200;
/** A hook call that takes longer than this has failed (the fetch has its own timeout). */
const HOOK_CALL_MS = 10_000;
/** How much of a delivery's timeout may pass before its answer is sent with what arrived so far. */
const ANSWER_SHARE = 0.5;
/** How long the tool guide may take to go into the composer (a third of it waiting for a composer still rendering). */
const GUIDE_FILL_MS = 30_000;

/**
 * Calls into the MAIN-world hook over its private port.
 *
 * @param {MessagePort} port
 */
function hookClient(port) {
  let nextId = 1;
  /** @type {Map<number, {resolve: (value: any) => void, reject: (error: Error) => void}>} */
  const waiting = new Map();
  /** @type {(message: any) => void} */
  let onStream = () => {};
  port.onmessage = (event) => {
    const message = event.data;
    if (message?.kind === "stream") onStream(message);
    else if (message?.kind === "reply" && waiting.has(message.id)) {
      const call = waiting.get(message.id);
      waiting.delete(message.id);
      if (typeof message.error === "string") call.reject(new Error(message.error));
      else call.resolve(message.value);
    }
  };
  return {
    /** @param {(message: any) => void} handler */
    onStream(handler) {
      onStream = handler;
    },
    call(method, args, timeoutMs = HOOK_CALL_MS) {
      const id = nextId++;
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting.delete(id);
          reject(new Error(`the page did not answer ${method} within ${timeoutMs} ms`));
        }, timeoutMs);
        waiting.set(id, {
          resolve: (value) => (clearTimeout(timer), resolve(value)),
          reject: (error) => (clearTimeout(timer), reject(error)),
        });
        port.postMessage({ kind: "call", id, method, args });
      });
    },
  };
}

/** What the adapters may reach of this page (see the `Page` type). */
function pageAccess(hook) {
  return {
    get url() {
      return location.href;
    },
    cookie(name) {
      for (const pair of document.cookie.split(";")) {
        const at = pair.indexOf("=");
        if (at > 0 && pair.slice(0, at).trim() === name) return decodeURIComponent(pair.slice(at + 1).trim());
      }
      return undefined;
    },
    readGlobal(path) {
      return hook.call("readGlobal", { path });
    },
    async fetchJson(url, { headers = {} } = {}) {
      if (new URL(url, location.href).origin !== location.origin) throw new Error("page values are read from the page's own origin only");
      const response = await fetch(url, { credentials: "include", headers });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      return response.json();
    },
  };
}

/**
 * A `browser.proxy_delivery`'s request, filled and made from the page.
 *
 * @returns {Promise<import('../lib/frames.js').ProxyResult>}
 */
async function proxyDelivery(adapter, hook, page, { conversation_id, request, timeout_ms }) {
  const timeoutMs = Number.isFinite(timeout_ms) && timeout_ms > 0 ? timeout_ms : 30_000;
  // The worker checked the frame; the page may have moved to another chat
  // since, and a value the page filled in must not move the request.
  const pageRefusal = tabRefusal(adapter, conversation_id, location.href);
  if (pageRefusal) return refusedProxy(pageRefusal);
  let filled;
  try {
    const values = await adapter.readPageValues(placeholderNames(request), page);
    filled = fillPageValues(request, values);
  } catch (error) {
    if (error instanceof MissingPageValue) {
      return { ok: false, status: null, body: null, error: error.message, error_code: "page_value_missing" };
    }
    throw error;
  }
  const requestRefusal = deliveryRequestRefusal(adapter, filled, conversation_id);
  if (requestRefusal) return refusedProxy(requestRefusal);
  const answer = await hook.call(
    "fetch",
    {
      method: filled.method,
      url: filled.url,
      headers: filled.headers,
      body: filled.body,
      timeoutMs,
      answerWithinMs: Math.floor(timeoutMs * ANSWER_SHARE),
    },
    timeoutMs + HOOK_CALL_MS,
  );
  if (typeof answer?.error === "string") return { ok: false, status: null, body: null, error: answer.error, error_code: null };
  const errorCode = proxyErrorCode(answer.status, answer.body);
  const isOk = errorCode === null && answer.status >= 200 && answer.status < 300;
  return {
    ok: isOk,
    status: answer.status,
    body: answer.body,
    error: errorCode ? `${adapter.name} refused the request as automated (HTTP ${answer.status})` : isOk ? null : `HTTP ${answer.status}`,
    error_code: errorCode,
  };
}

/** @param {import('../lib/delivery-rules.js').Refusal} refusal */
function refusedProxy({ reason, error }) {
  return { ok: false, status: null, body: null, error, error_code: "blocked", refused: reason };
}

/**
 * Runs what types into the composer (DOM deliveries, the tool guide) one
 * after the other: two typed into one composer at once would mix their texts.
 */
function composerQueue() {
  let last = Promise.resolve();
  /**
   * @template T
   * @param {() => Promise<T>} job
   * @returns {Promise<T>}
   */
  return (job) => {
    const next = last.then(job);
    last = next.catch(() => {});
    return next;
  };
}

/**
 * The "insert the tool guide into every new conversation" option: on a new
 * chat (no conversation id in the URL), once per visit of that URL
 * (`NewChatGuide`), the platform's guide goes into the composer, unsent,
 * when the composer is empty (`fillComposer` never writes over a draft).
 */
function newChatGuide(adapter, isEnabled, inComposer) {
  const visits = new NewChatGuide();
  const conversationId = () => adapter.conversationIdFromUrl(location.href);
  return () => {
    if (!visits.shouldInsert({ isEnabled, url: location.href, conversationId: conversationId() })) return;
    chrome.runtime
      .sendMessage({ type: "content.guide", platform: adapter.name, page_url: location.href })
      .then((guide) => {
        if (!guide?.ok) throw new Error(guide?.error ?? "no answer");
        // The first message may have gone out while the guide came: never into a conversation.
        if (conversationId() !== null) return null;
        return inComposer(() => fillComposer({ document, table: adapter.dom.selectors, text: guide.text, timeoutMs: GUIDE_FILL_MS }));
      })
      .then((filled) => {
        if (filled && !filled.ok) console.info("Conductor: the tool guide was not inserted:", filled.error);
      })
      .catch((error) => console.info("Conductor: no tool guide for this new chat:", error?.message ?? error));
  };
}

/**
 * Watches the page's own end-of-message signal, looking at most every
 * DOM_CHECK_MS; `onChecked` runs after each look (the apps change their
 * URL without loading a page, and the page changes with it). On a site read
 * from the page, `turns` (lib/turn-watch.js) decides, and a look is also
 * due when a quiet answer may have become finished (no change wakes one);
 * an answer finished that way on a page whose streaming selectors never
 * matched is reported (`selector_missing`, `streaming`).
 *
 * @param {TurnWatch | null} turns
 */
function watchPage(adapter, tracker, onChecked, turns) {
  let timer = null;
  let wakeTimer = null;
  let checkedAt = 0;
  const check = () => {
    timer = null;
    checkedAt = performance.now();
    if (turns) {
      const state = turns.look(adapter.dom.turnLook(document), checkedAt);
      tracker.generatingChanged(state.isWriting);
      if (state.finished === "quiet" && state.signalNeverSeen) noticed(adapter, "selector_missing", { selectors: "streaming" });
      clearTimeout(wakeTimer);
      const wake = turns.wakeIn(performance.now());
      // A little past the quiet period: the look must see it passed.
      wakeTimer = wake === null ? null : setTimeout(check, wake + 20);
    } else {
      tracker.generatingChanged(adapter.dom.isGenerating(document));
    }
    onChecked();
  };
  // The first change after a quiet spell is looked at at once, the next
  // ones at most every DOM_CHECK_MS: a fast answer whose stop button shows
  // for less than that is still seen writing, and then done.
  new MutationObserver(() => {
    if (timer !== null) return;
    const wait = DOM_CHECK_MS - (performance.now() - checkedAt);
    if (wait <= 0) check();
    else timer = setTimeout(check, wait);
  }).observe(document.documentElement, { subtree: true, childList: true, attributes: true, characterData: true });
  check();
}

/**
 * Hands an adapter report's kind and detail to the worker, which counts
 * them and sends `browser.adapter_report` at most once a minute per
 * platform and kind (lib/reports.js keeps only entries that hold no text).
 */
function noticed(adapter, kind, detail) {
  chrome.runtime
    .sendMessage({ type: "content.adapter_report", platform: adapter.name, adapter: adapter.version, kind, detail })
    .catch(() => {}); // the worker is restarting: the next one is counted
}

/**
 * A page of one of the adapters with network capture (content/relay.js, the
 * manifest's content scripts).
 *
 * @param {Promise<MessagePort>} portReady the hook's port
 */
export async function start(portReady) {
  const adapter = adapterForUrl(location.href);
  if (!adapter || !NETWORK_ADAPTERS.includes(adapter)) return;
  await run(adapter, hookClient(await portReady));
}

/**
 * A page of a site read from the page only (content/site-relay.js, a
 * script registered for the sites switched on): its adapter is built from
 * the description in force, which the worker gives (the server's when it
 * handed over a valid one, else the plugin's own). No MAIN-world hook:
 * nothing of the page's network is watched.
 */
export async function startOnSite() {
  const answer = await chrome.runtime.sendMessage({ type: "content.site" });
  if (!answer?.description || !isSitePage(answer.description, location.href)) return;
  await run(siteAdapter(answer.description), null);
}

/**
 * @param {import('../adapters/types.js').Adapter} adapter
 * @param {ReturnType<typeof hookClient> | null} hook the MAIN-world hook, null on a site read from the page only
 */
async function run(adapter, hook) {
  const page = hook ? pageAccess(hook) : null;
  const settings = await chrome.runtime.sendMessage({ type: "content.settings" }).catch(() => null);
  const conversationId = () => adapter.conversationIdFromUrl(location.href) ?? "";
  // A site read from the page tells a finished answer by its signal or by its text staying the same.
  const turns = adapter.dom.turnLook ? new TurnWatch({ quietMs: quietMsOf(settings?.answerQuietMs) }) : null;

  const tracker = new CaptureTracker({
    adapter,
    conversationId,
    // What the tracker noticed (a stream not understood, a page read
    // instead) goes to the worker, which counts and reports it.
    // A site read from the page only has no stream to fall back from.
    notice: (kind, detail) => (hook || kind !== "dom_fallback_used") && noticed(adapter, kind, detail),
    // An answer its app withdrew: the worker notes it for the side panel.
    withdrawn: ({ reason, conversation_id }) =>
      chrome.runtime.sendMessage({ type: "content.answer_withdrawn", platform: adapter.name, reason, conversation_id }).catch(() => {}),
    readDom() {
      // A newer answer growing since: not a finished one to read.
      if (turns?.isWriting) return null;
      const element = adapter.dom.lastAssistantMessage(document);
      if (!element) {
        // A site whose answer selectors match nothing beside the person's turns changed its page.
        if (adapter.dom.missingSelectors?.(document).includes("answer")) noticed(adapter, "selector_missing", { selectors: "answer" });
        return null;
      }
      return { text: elementToMarkdown(element, { code: adapter.dom.codeBlocks ?? null }), message_id: adapter.dom.messageId(element) ?? "" };
    },
    report(capture, method) {
      chrome.runtime
        .sendMessage({
          type: "content.final_message",
          platform: adapter.name,
          capture,
          method,
          page_url: location.href,
          title: document.title,
          observed_at: new Date().toISOString(),
        })
        .catch(() => {}); // the worker is restarting: the next answer goes through again
    },
  });
  hook?.onStream((message) => {
    const handlers = {
      start: () => tracker.streamStarted(message.id, { url: message.url, body: message.body, pageUrl: message.page_url }),
      chunk: () => tracker.streamChunk(message.id, message.text),
      end: () => tracker.streamEnded(message.id, { status: message.status, contentType: typeof message.content_type === "string" ? message.content_type : "" }),
      abort: () => tracker.streamAborted(message.id, { reason: typeof message.reason === "string" ? message.reason : "" }),
    };
    if (!Object.hasOwn(handlers, message.phase) || (message.phase === "chunk" && typeof message.text !== "string")) return;
    handlers[message.phase]();
  });
  // With stream reading switched off in the options the hook watches
  // nothing, and every answer is read from the page.
  const requests = settings?.readStreams === false ? [] : [{ method: adapter.completionRequest.method, source: adapter.completionRequest.pattern.source }];
  await hook?.call("watch", { requests });
  const inComposer = composerQueue();
  watchPage(adapter, tracker, newChatGuide(adapter, settings?.insertGuide === true, inComposer), turns);

  const table = adapter.dom.selectors;
  const domDelivery = ({ conversation_id, text, timeout_ms }) =>
    inComposer(() => {
      // Checked when its turn comes: the page may have moved to another chat meanwhile.
      const refusal = tabRefusal(adapter, conversation_id, location.href);
      if (refusal) {
        return Promise.resolve({ ok: false, error: refusal.error, error_code: "blocked", refused: refusal.reason, evidence: { user_turn_seen: false } });
      }
      return deliverThroughComposer({ document, table, text: String(text), timeoutMs: timeout_ms });
    }).then((result) => {
      if (result.error_code === "selector_missing") noticed(adapter, "selector_missing", { selectors: "composer" });
      return result;
    });
  const deliveries = {
    proxy_delivery: (message) =>
      (hook ? proxyDelivery(adapter, hook, page, message) : Promise.resolve(refusedProxy({ reason: "refused_method", error: "the plugin refused this delivery: this site takes deliveries through its composer only" }))).catch((error) => ({
        ok: false, status: null, body: null, error: `the page could not make the request: ${error?.message ?? error}`, error_code: null,
      })),
    dom_delivery: (message) =>
      domDelivery(message).catch((error) => ({
        ok: false, error: `the page could not type the text: ${error?.message ?? error}`, error_code: null, evidence: { user_turn_seen: false },
      })),
    // The popup's "Insert tool guide": into the composer, not sent.
    guide_fill: (message) =>
      inComposer(() => fillComposer({ document, table, text: String(message.text), timeoutMs: GUIDE_FILL_MS })).catch((error) => ({
        ok: false, error: `the page could not take the text: ${error?.message ?? error}`, error_code: null, already_filled: false,
      })),
    // After a proxy delivery posted: the page shows the reply only once reloaded.
    reply_note: async () => {
      showReplyNote(document);
      return null;
    },
  };
  chrome.runtime.onMessage.addListener((message, _sender, sendResponse) => {
    if (typeof message?.type !== "string" || !Object.hasOwn(deliveries, message.type)) return false;
    deliveries[message.type](message).then(sendResponse);
    return true; // answered asynchronously
  });
  window.addEventListener("pagehide", () => tracker.stop());
  chrome.runtime.sendMessage({ type: "content.ready", platform: adapter.name, conversation_id: conversationId() }).catch(() => {});
}
