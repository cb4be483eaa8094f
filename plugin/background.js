/**
 * Conductor's service worker: holds the WebSocket to the server (SPEC §6),
 * keeps the outbox of final messages not yet acknowledged, performs proxy
 * and DOM deliveries through a tab of the conversation, asks the server for
 * the tool guide and puts it into a tab's composer, and shows the
 * connection on the badge.
 *
 * An MV3 worker is stopped when idle and its timers die with it, so what must
 * survive lives in chrome.storage: the settings, the outbox and the delivery
 * memory in `local`, the connection's state in `session`. Every start (the
 * browser's, an alarm's, a content script's message) begins by reconnecting
 * if it should; the `ping` every 20 s keeps a connected worker alive
 * (Chrome 116+).
 */

import { ADAPTERS, adapterByName, adapterForUrl } from "./adapters/index.js";
import { reconnectDelay } from "./lib/backoff.js";
import { DeliveryMemory } from "./lib/delivery-memory.js";
import { frameRefusal } from "./lib/delivery-rules.js";
import { clampTimeout } from "./lib/composer.js";
import { domResultFrame, finalMessageFrame, helloFrame, isPosted, isSentToComposer, proxyResultFrame, socketUrl } from "./lib/frames.js";
import { guideFromAnswer, guideGetFrame, NotConnected, PendingAnswers } from "./lib/guide.js";
import { Outbox } from "./lib/outbox.js";
import { serverUrlProblem } from "./lib/server-url.js";
import { afterProxyDelivery } from "./lib/reply-note.js";
import { ReportBatcher } from "./lib/reports.js";

const VERSION = chrome.runtime.getManifest().version;
const PING_MS = 20_000;
/** Nothing heard for this long (two pings unanswered, or a hello) means the socket is dead. */
const SILENCE_MS = 2 * PING_MS + 5_000;
const RECONNECT_ALARM = "conductor-reconnect";
/** Sends the adapter reports that came due while nothing else happened. */
const REPORTS_ALARM = "conductor-reports";
/** How long a tab opened for a delivery may take to load its content script. */
const OPEN_TAB_MS = 30_000;
/** How long after a tab finished loading its content script may take to say it is ready. */
const RELOAD_AFTER_MS = 2_000;
/** Spacing of resent frames, under the server's per-connection frame limit (50/s by default). */
const RESEND_SPACING_MS = 40;
/** Close codes after which reconnecting cannot help until the options change (SPEC §6). */
const REFUSED_CODES = new Set([4401, 4403]);
const REPLACED_CODE = 4409;
/** Error codes that mean the server will never take the frame: it leaves the outbox. */
const REJECTED_FRAME_CODES = new Set(["invalid", "bad_frame", "too_large", "unknown_type"]);
/**
 * Error codes after which the same frame may be taken later: it stays in the
 * outbox and goes again on this socket after a delay that grows with each
 * refusal of that frame (`rate_limited`: dropped by the frame limit;
 * `server_error`: the server failed to store it, e.g. its database was away).
 */
const RETRY_FRAME_CODES = new Set(["rate_limited", "server_error"]);
/** Refusals counted per frame, for the growing delay (reset by its ack). */
const refusals = new Map();
const RECENT_ACKS = 50;
const REMEMBERED_BODY_CHARS = 4096;
/** How long past its own timeout a tab's content script may take to answer a DOM delivery. */
const DOM_ANSWER_MARGIN_MS = 5_000;
/** The server's bound on a frame (SPEC §6). */
const MAX_FRAME_BYTES = 1024 * 1024;
/** Observation times kept for frames not yet acknowledged (the outbox drops some unacknowledged). */
const MAX_OBSERVED = 1000;
/**
 * How long a new chat's page waits for a worker just woken (by that page's
 * message) to connect before its guide.get fails.
 */
const NEW_CHAT_CONNECT_MS = 5_000;

const BADGES = {
  connected: { text: "on", color: "#1a7f37" },
  connecting: { text: "…", color: "#6e7781" },
  refused: { text: "key", color: "#cf222e" },
  paused: { text: "off", color: "#bf8700" },
  unconfigured: { text: "set", color: "#6e7781" },
  outdated: { text: "upd", color: "#bf8700" },
};

/** chrome.storage as the `{get, set}` store the pure modules take. */
function storeOf(area) {
  return {
    async get(key) {
      return (await area.get(key))[key];
    },
    set(key, value) {
      return area.set({ [key]: value });
    },
  };
}

const local = storeOf(chrome.storage.local);
const session = storeOf(chrome.storage.session);
const outbox = new Outbox(local, { key: "outbox", limit: 200 });
const deliveries = new DeliveryMemory(local, { key: "deliveries" });

/** @type {WebSocket | null} */
let socket = null;
let isHelloAcknowledged = false;
let pingTimer = null;
let lastHeardAt = 0;
let retryTimer = null;
let attempt = 0;
/** @type {Promise<void> | null} */
let ensuring = null;
/** Frame ids sent on the current socket (a resend happens on the next one). */
let sentOnSocket = new Set();
/** When each unacknowledged frame was observed, for the ack latency shown in the popup. */
const observedAt = new Map();
let isFlushing = false;
let isFlushAgain = false;
/** Deliveries being performed, by delivery_key: a repeat waits for the first. */
const inFlight = new Map();
/** Tabs opened for a delivery, waiting for their content script: tab id -> resolve. */
const tabWaiters = new Map();
/**
 * Questions to the server waiting for their answer (`guide.get`). Kept in
 * this worker only: a question lives no longer than the socket it went out
 * on, and whoever asked is waiting for the answer in this worker's lifetime.
 */
const answers = new PendingAnswers();

// ---- state shown on the badge and in the popup ----------------------------

/**
 * `reason` says why, for the options page's pairing line: "unreachable" (no
 * socket to the server), "outdated" (hello.ok's `plugin_outdated`), "" otherwise;
 * `at` when it was last set (a status older than the settings is not theirs yet).
 */
async function setStatus(state, detail = "", reason = "") {
  const previous = (await session.get("status")) ?? {};
  const status = {
    ...previous, state, detail, reason, since: previous.state === state ? previous.since : Date.now(), at: Date.now(),
  };
  await session.set("status", status);
  // The server supports only newer plugins (hello.ok `plugin_outdated`): it works, but says so.
  const isOutdated = state === "connected" && (await session.get("pluginOutdated")) === true;
  const badge = BADGES[isOutdated ? "outdated" : state];
  await chrome.action.setBadgeText({ text: badge.text });
  await chrome.action.setBadgeBackgroundColor({ color: badge.color });
  const note = isOutdated ? " (update the extension)" : "";
  await chrome.action.setTitle({ title: `Conductor: ${state}${detail ? ` (${detail})` : ""}${note}` });
}

async function countAttempt() {
  const status = (await session.get("status")) ?? {};
  await session.set("status", { ...status, attempts: (status.attempts ?? 0) + 1, lastAttemptAt: Date.now() });
}

async function recordAck(id) {
  const observed = observedAt.get(id);
  observedAt.delete(id);
  if (observed === undefined) return;
  const acks = ((await session.get("acks")) ?? []).slice(-(RECENT_ACKS - 1));
  acks.push({ id, ms: Date.now() - observed, at: Date.now() });
  await session.set("acks", acks);
}

// ---- the connection -------------------------------------------------------

function hasSettings(settings) {
  return Boolean(settings && socketUrl(settings.serverUrl) && settings.clientId && settings.token);
}

/** Settings saved before the plain-http rule, or edited around the options page, are not used either. */
function serverProblem(settings) {
  return serverUrlProblem(settings.serverUrl, { isUnencryptedAccepted: settings.isUnencryptedAccepted === true });
}

/** Connects unless connected, connecting, paused, refused or not configured. Safe to call often. */
function ensureConnected() {
  ensuring ??= connectIfDue().finally(() => {
    ensuring = null;
  });
  return ensuring;
}

async function connectIfDue() {
  if (socket || retryTimer) return;
  const { settings, paused } = await chrome.storage.local.get(["settings", "paused"]);
  if (!hasSettings(settings)) return setStatus("unconfigured", "open the options to pair with a server");
  if (serverProblem(settings)) return setStatus("unconfigured", "plain http to another machine: open the options and tick \u201cI understand this is unencrypted\u201d, or use https");
  if (paused) return setStatus("paused", "paused from the popup");
  const holdOff = await session.get("holdOff");
  if (holdOff) return setStatus(holdOff.state, holdOff.detail);
  await countAttempt();
  await setStatus("connecting");
  open(settings);
}

function open(settings) {
  const ws = new WebSocket(socketUrl(settings.serverUrl));
  socket = ws;
  isHelloAcknowledged = false;
  sentOnSocket = new Set();
  lastHeardAt = Date.now();
  ws.onopen = () => {
    ws.send(JSON.stringify(helloFrame({ clientId: settings.clientId, token: settings.token, version: VERSION, adapters: ADAPTERS })));
  };
  // Each ping also checks that the server was heard from lately: a socket
  // whose network went away without a close would otherwise look open for
  // minutes. Until hello.ok it checks that the hello was answered.
  clearInterval(pingTimer);
  pingTimer = setInterval(() => {
    if (ws !== socket) return;
    if (Date.now() - lastHeardAt > SILENCE_MS) {
      ws.close(4000, "no answer");
      onClosed(1006).catch(() => {});
    } else if (isHelloAcknowledged) {
      send({ type: "ping" });
    }
  }, PING_MS);
  ws.onmessage = (event) => {
    if (ws !== socket || typeof event.data !== "string") return;
    lastHeardAt = Date.now();
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch {
      return;
    }
    if (frame && typeof frame.type === "string" && Object.hasOwn(FRAME_HANDLERS, frame.type)) {
      FRAME_HANDLERS[frame.type](frame).catch((error) => console.warn("Conductor: a frame failed:", frame.type, error));
    }
  };
  ws.onclose = (event) => {
    if (ws === socket) onClosed(event.code).catch((error) => console.warn("Conductor: close handling failed:", error));
  };
}

async function onClosed(code) {
  // Closed before any hello.ok: the server was never reached (or answered no hello).
  const wasReached = isHelloAcknowledged;
  socket = null;
  isHelloAcknowledged = false;
  clearInterval(pingTimer);
  answers.failAll("the connection to the server closed before it answered");
  if (REFUSED_CODES.has(code)) {
    const holdOff = { state: "refused", detail: `token refused (close code ${code}); check the options` };
    await session.set("holdOff", holdOff);
    return setStatus(holdOff.state, holdOff.detail);
  }
  if (code === REPLACED_CODE) {
    // Another browser of the same client id took over: reconnecting would
    // take it back and start a fight. Wait for the user (popup) or new options.
    const holdOff = { state: "paused", detail: "another browser window of this client took over" };
    await session.set("holdOff", holdOff);
    return setStatus(holdOff.state, holdOff.detail);
  }
  const delay = reconnectDelay(attempt++);
  const retry = `reconnecting in ${Math.ceil(delay / 1000)} s`;
  if (wasReached) await setStatus("connecting", retry);
  else await setStatus("connecting", `server unreachable (close code ${code}); ${retry}`, "unreachable");
  retryTimer = setTimeout(() => {
    retryTimer = null;
    ensureConnected();
  }, delay);
}

/** Drops the socket (new options, a pause) without the close handler's reconnect. */
function disconnect() {
  clearTimeout(retryTimer);
  retryTimer = null;
  clearInterval(pingTimer);
  const ws = socket;
  socket = null;
  isHelloAcknowledged = false;
  ws?.close(1000);
  answers.failAll("the connection to the server was closed (new options or a pause)");
}

function send(frame) {
  if (!socket || socket.readyState !== WebSocket.OPEN || !isHelloAcknowledged) return false;
  socket.send(JSON.stringify(frame));
  return true;
}

/** Sends the outbox's frames not yet sent on this socket, oldest first, spaced out. */
async function flush() {
  if (isFlushing) {
    isFlushAgain = true;
    return;
  }
  isFlushing = true;
  try {
    do {
      isFlushAgain = false;
      for (const frame of await outbox.pending()) {
        if (sentOnSocket.has(frame.id)) continue;
        if (!send(frame)) return;
        sentOnSocket.add(frame.id);
        if (!observedAt.has(frame.id)) observedAt.set(frame.id, Date.parse(frame.observed_at) || Date.now());
        await new Promise((resolve) => setTimeout(resolve, RESEND_SPACING_MS));
      }
    } while (isFlushAgain);
  } finally {
    isFlushing = false;
  }
}

// ---- adapter reports (SPEC §6 browser.adapter_report) ----------------------

/**
 * Counts kept in chrome.storage.local ("reports", lib/reports.js), so a
 * worker restart loses none; one change at a time, so no count is lost to
 * two read-modify-writes at once.
 */
let reportsTurn = Promise.resolve();

function withReports(change) {
  const next = reportsTurn.then(async () => {
    const batcher = ReportBatcher.fromJSON(await local.get("reports"));
    await change(batcher);
    await local.set("reports", batcher.toJSON());
  });
  reportsTurn = next.catch((error) => console.warn("Conductor: adapter reports were not kept:", error));
  return reportsTurn;
}

/** Counts one report, and sends what is due. */
function countReport(report) {
  return withReports(async (batcher) => {
    batcher.add(report, Date.now());
    sendDueReports(batcher);
  });
}

/** Sends the reports due now, each at most once a minute per platform and kind; unsent ones wait. */
function sendDueReports(batcher) {
  const now = Date.now();
  for (const { key, frame } of batcher.due(now)) {
    if (!send(frame)) return;
    batcher.sent(key, now);
  }
}

/** What a delivery's failure says about the site: a report of its kind. */
const DELIVERY_REPORTS = { page_value_missing: "page_value_missing", blocked: "delivery_blocked" };

/**
 * Counts a failed delivery's report; `refused` is the plugin's own refusal
 * (lib/delivery-rules.js: its `reason` says which check), else the app's.
 */
function reportDeliveryFailure(frame, result, method) {
  const kind = DELIVERY_REPORTS[result?.error_code];
  const platform = typeof frame.platform === "string" ? frame.platform : "";
  if (!kind || !ADAPTERS.some((adapter) => adapter.name === platform)) return;
  const detail = {
    method,
    ...(Number.isInteger(result.status) ? { status: result.status } : {}),
    ...(typeof result.refused === "string" ? { reason: result.refused } : {}),
  };
  countReport({ platform, adapter: adapterByName(platform).version, kind, detail });
}

/**
 * The delivery frame refused before anything is looked up or opened (a
 * forged frame, or a request the adapter may not make), or null. Logged:
 * no real server sends one, so each is worth a look.
 *
 * @param {any} frame
 * @param {DeliveryKind} kind
 */
function refusedDelivery(frame, kind) {
  let adapter;
  try {
    adapter = adapterByName(frame.platform);
  } catch {
    return null; // deliverInTab answers an unknown platform
  }
  const refusal = frameRefusal(adapter, frame);
  if (!refusal) return null;
  console.warn("Conductor: refused a delivery:", { type: frame.type, platform: adapter.name, reason: refusal.reason, error: refusal.error });
  return { ...kind.failed(refusal.error, "blocked"), refused: refusal.reason };
}

const FRAME_HANDLERS = {
  async "hello.ok"(frame) {
    isHelloAcknowledged = true;
    attempt = 0;
    // SPEC §9: still connected, but the person should update the plugin (badge, popup, options page).
    const isOutdated = frame.plugin_outdated === true;
    await session.set("pluginOutdated", isOutdated);
    if (isOutdated) {
      await setStatus("connected", "this plugin is older than the server supports: update it", "outdated");
    } else {
      await setStatus("connected");
    }
    await flush();
    await withReports(sendDueReports);
  },
  async ack(frame) {
    if (typeof frame.id !== "string") return;
    refusals.delete(frame.id);
    await outbox.ack(frame.id);
    await recordAck(frame.id);
  },
  async pong() {},
  async guide(frame) {
    answers.answer(frame);
  },
  async error(frame) {
    if (answers.answer(frame)) return; // the answer to a question (guide.get)
    // An unauthorized hello is followed by the server's close (4401).
    if (typeof frame.id === "string" && REJECTED_FRAME_CODES.has(frame.code)) {
      await outbox.ack(frame.id);
      observedAt.delete(frame.id);
      await session.set("lastRejected", { id: frame.id, code: frame.code, detail: String(frame.detail ?? ""), at: Date.now() });
    } else if (typeof frame.id === "string" && RETRY_FRAME_CODES.has(frame.code)) {
      const attempt = refusals.get(frame.id) ?? 0;
      if (attempt === 0 && refusals.size >= MAX_OBSERVED) refusals.clear();
      refusals.set(frame.id, attempt + 1);
      setTimeout(() => {
        sentOnSocket.delete(frame.id);
        flush();
      }, 1000 + reconnectDelay(attempt));
    }
  },
  async "browser.proxy_delivery"(frame) {
    const result = refusedDelivery(frame, DELIVERY_KINDS.proxy) ?? (await deliver(frame, DELIVERY_KINDS.proxy));
    send(proxyResultFrame(String(frame.request_id), result));
    reportDeliveryFailure(frame, result, "http");
  },
  async "browser.dom_delivery"(frame) {
    const result = refusedDelivery(frame, DELIVERY_KINDS.dom) ?? (await deliver(frame, DELIVERY_KINDS.dom));
    send(domResultFrame(String(frame.request_id), result));
    reportDeliveryFailure(frame, result, "dom");
  },
};

// ---- deliveries -----------------------------------------------------------

/**
 * @typedef {{
 *   perform(frame: any): Promise<any>,
 *   failed(error: string, errorCode?: string | null): any,
 *   isDone(result: any): boolean,
 *   remembered(result: any): any,
 *   fromEarlier(earlier: any): any,
 * }} DeliveryKind
 *   `isDone`: the text reached the chat, so a repeat must not send it again;
 *   `fromEarlier`: the answer to a repeat, given what a delivery of either
 *   kind under the same key answered or remembered.
 */

/** Results of DOM deliveries carry `evidence`; proxy results never do. */
function isDomResult(result) {
  return typeof result?.evidence === "object" && result.evidence !== null;
}

/**
 * The two kinds share one `delivery_key` memory: a task that fell back from
 * one method to the other keeps its key (SPEC §6.1), and a text already
 * sent by either must not go out again by the other.
 *
 * @type {{proxy: DeliveryKind, dom: DeliveryKind}}
 */
const DELIVERY_KINDS = {
  proxy: {
    perform: performProxyDelivery,
    failed: (error, errorCode = null) => ({ ok: false, status: null, body: null, error, error_code: errorCode }),
    isDone: isPosted,
    // The start of the body is what the server reads (the new message's id,
    // an early error); all of it, for hundreds of deliveries, would not fit
    // in chrome.storage.local.
    remembered: (result) => (typeof result.body === "string" ? { ...result, body: result.body.slice(0, REMEMBERED_BODY_CHARS) } : result),
    // Sent through the composer already: not posted again. `blocked` moves
    // the server on to its next method (SPEC §6.1), whose repeat of this key
    // answers with the DOM delivery's own result.
    fromEarlier: (earlier) =>
      isDomResult(earlier)
        ? DELIVERY_KINDS.proxy.failed("already sent through the composer (browser.dom_delivery); not posted again", "blocked")
        : earlier,
  },
  dom: {
    perform: performDomDelivery,
    failed: (error, errorCode = null) => ({ ok: false, error, error_code: errorCode, evidence: { user_turn_seen: false } }),
    isDone: isSentToComposer,
    remembered: (result) => result,
    // A proxy post of the same key is left to the page's own check: its
    // user turn, shown last, is answered `already_sent` without typing.
    fromEarlier: (earlier) => (isDomResult(earlier) ? earlier : null),
  },
};

/**
 * Performs a delivery once per `delivery_key`: a repeat while the first
 * runs waits for it, a repeat after a delivery that reached the chat gets
 * the remembered result. Only deliveries that reached the chat are
 * remembered, so a failed one is tried again.
 *
 * @param {any} frame
 * @param {DeliveryKind} kind
 */
async function deliver(frame, kind) {
  const key = typeof frame.delivery_key === "string" ? frame.delivery_key : "";
  if (key) {
    const earlier = kind.fromEarlier(await deliveries.recall(key));
    if (earlier) return earlier;
    if (inFlight.has(key)) {
      const answered = kind.fromEarlier(await inFlight.get(key).catch(() => null));
      if (answered) return answered;
    }
  }
  const performing = kind.perform(frame).catch((error) => kind.failed(`the delivery failed in the browser: ${error?.message ?? error}`)).then(async (result) => {
    if (key && kind.isDone(result)) await deliveries.remember(key, kind.remembered(result));
    return result;
  });
  if (key) inFlight.set(key, performing);
  try {
    return await performing;
  } finally {
    if (key && inFlight.get(key) === performing) inFlight.delete(key);
  }
}

/**
 * Sends `message` to the content script of a tab showing the frame's
 * conversation, opening one when none is open.
 *
 * @param {any} frame
 * @param {any} message
 * @param {DeliveryKind} kind
 * @param {(tabId: number, answer: any) => void} [onAnswer] told which tab answered, and what
 */
async function deliverInTab(frame, message, kind, onAnswer = () => {}) {
  let adapter;
  try {
    adapter = adapterByName(frame.platform);
  } catch (error) {
    return kind.failed(error.message);
  }
  const target = { conversation_id: String(frame.conversation_id ?? ""), page_url: typeof frame.page_url === "string" ? frame.page_url : "" };
  for (const tab of await conversationTabs(adapter, target.conversation_id)) {
    let answer;
    try {
      answer = await chrome.tabs.sendMessage(tab.id, message);
    } catch {
      // No content script in that tab (open since before the plugin was installed): try the next.
      continue;
    }
    onAnswer(tab.id, answer);
    return answer;
  }
  let tabId;
  try {
    tabId = await openTab(adapter.conversationUrl(target));
  } catch (error) {
    return kind.failed(`no page of the conversation could be opened: ${error.message}`, "no_tab");
  }
  const answer = await chrome.tabs.sendMessage(tabId, message);
  onAnswer(tabId, answer);
  return answer;
}

/** @returns {Promise<import('./lib/frames.js').ProxyResult>} */
function performProxyDelivery(frame) {
  const message = { type: "proxy_delivery", conversation_id: frame.conversation_id, request: frame.request, timeout_ms: frame.timeout_ms };
  return deliverInTab(frame, message, DELIVERY_KINDS.proxy, (tabId, result) => {
    markTabAfterPost(tabId, result).catch((error) => console.warn("Conductor: could not mark the tab:", error));
  });
}

/**
 * The chat app's page did not make the proxy delivery's request, so it shows
 * the reply only once reloaded: the tab gets a note saying so, or is
 * reloaded when the options say so (lib/reply-note.js). Not awaited by the
 * delivery: its result goes to the server meanwhile.
 */
async function markTabAfterPost(tabId, result) {
  const { settings } = await chrome.storage.local.get("settings");
  const action = afterProxyDelivery(result, settings);
  if (action === "reload") await chrome.tabs.reload(tabId);
  else if (action === "note") await chrome.tabs.sendMessage(tabId, { type: "reply_note" });
}

/**
 * The composer of a tab of the conversation types and sends the text. A tab
 * that does not answer in time (closed, navigated away) fails the delivery.
 *
 * @returns {Promise<import('./lib/composer.js').DomResult>}
 */
async function performDomDelivery(frame) {
  const timeoutMs = clampTimeout(frame.timeout_ms);
  if (typeof frame.text !== "string" || frame.text.trim() === "") return DELIVERY_KINDS.dom.failed("the delivery has no text");
  const message = { type: "dom_delivery", conversation_id: frame.conversation_id, text: frame.text, timeout_ms: timeoutMs };
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve(DELIVERY_KINDS.dom.failed(`the page did not answer within ${timeoutMs + DOM_ANSWER_MARGIN_MS} ms`)), timeoutMs + DOM_ANSWER_MARGIN_MS);
  });
  try {
    return await Promise.race([deliverInTab(frame, message, DELIVERY_KINDS.dom), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The open tabs showing this conversation. */
async function conversationTabs(adapter, conversationId) {
  const tabs = await chrome.tabs.query({ url: adapter.origins.map((origin) => `${origin}/*`) });
  return tabs.filter((tab) => tab.id !== undefined && tab.url && adapter.conversationIdFromUrl(tab.url) === conversationId);
}

/**
 * Opens `url` in a background tab and resolves with its id once its content
 * script is ready. A tab that finished loading without its content script
 * speaking shows an error page (offline for a moment, a network blip): it
 * is reloaded once.
 */
async function openTab(url) {
  const tab = await chrome.tabs.create({ url, active: false });
  return new Promise((resolve, reject) => {
    let reloadTimer = null;
    let hasReloaded = false;
    const onUpdated = (tabId, change) => {
      if (tabId !== tab.id || change.status !== "complete" || hasReloaded) return;
      clearTimeout(reloadTimer);
      reloadTimer = setTimeout(() => {
        hasReloaded = true;
        chrome.tabs.reload(tab.id).catch(() => {});
      }, RELOAD_AFTER_MS);
    };
    const done = () => {
      clearTimeout(timer);
      clearTimeout(reloadTimer);
      chrome.tabs.onUpdated.removeListener(onUpdated);
      tabWaiters.delete(tab.id);
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`the page did not load within ${OPEN_TAB_MS / 1000} s`));
    }, OPEN_TAB_MS);
    chrome.tabs.onUpdated.addListener(onUpdated);
    tabWaiters.set(tab.id, () => {
      done();
      resolve(tab.id);
    });
  });
}

// ---- the tool guide ---------------------------------------------------------

/**
 * Asks the server for the tool guide of a conversation (null: a new chat,
 * which gets its platform's guide). Not kept in the outbox: it fails at once
 * when not connected and after GUIDE_TIMEOUT_MS without an answer.
 *
 * @returns {Promise<{version: string, text: string}>}
 * @throws {Error} with a message to show the person
 */
async function requestGuide({ platform, conversationId }) {
  const id = crypto.randomUUID();
  let isSent = false;
  try {
    return guideFromAnswer(await answers.ask(id, () => (isSent = send(guideGetFrame({ id, platform, conversationId }))), "guide.get"));
  } catch (error) {
    if (isSent || !(error instanceof NotConnected)) throw error;
    // Not sent: say what the connection is doing, as the popup's state line does.
    const status = (await session.get("status")) ?? {};
    const state = [status.state, status.detail].filter(Boolean).join(", ");
    throw new NotConnected(`not connected to the Conductor server${state ? ` (${state})` : ""}`);
  }
}

/**
 * The popup's "Insert tool guide": the guide of the conversation that tab
 * `tabId` shows, put into its composer and not sent.
 *
 * @returns {Promise<{ok: true, version: string, already_filled: boolean} | {ok: false, error: string}>}
 */
async function insertGuideIntoTab(tabId) {
  const tab = await chrome.tabs.get(tabId).catch(() => null);
  // The tab's URL is readable for the adapters' origins only (host permissions).
  const adapter = tab?.url ? adapterForUrl(tab.url) : null;
  if (!adapter) return { ok: false, error: `the active tab is not a chat page of ${ADAPTERS.map((known) => known.name).join(", ")}` };
  let guide;
  try {
    guide = await requestGuide({ platform: adapter.name, conversationId: adapter.conversationIdFromUrl(tab.url) });
  } catch (error) {
    return { ok: false, error: error.message };
  }
  let filled;
  try {
    filled = await chrome.tabs.sendMessage(tabId, { type: "guide_fill", text: guide.text });
  } catch {
    return { ok: false, error: "the page has no Conductor script yet (open since before the plugin was installed?): reload the tab" };
  }
  if (!filled?.ok) return { ok: false, error: filled?.error ?? "the page did not answer" };
  return { ok: true, version: guide.version, already_filled: Boolean(filled.already_filled) };
}

// ---- messages from the content scripts and the extension's pages -------------

/** Is the sender one of the extension's own pages (the popup, the options), not a content script? */
function isFromExtensionPage(sender) {
  return sender.id === chrome.runtime.id && typeof sender.url === "string" && sender.url.startsWith(chrome.runtime.getURL(""));
}

/** Is the sender a content script on one of this platform's pages? */
function isFromPlatform(sender, platform) {
  if (sender.id !== chrome.runtime.id || !sender.tab || !sender.url) return false;
  try {
    return adapterByName(platform).origins.includes(new URL(sender.url).origin);
  } catch {
    return false;
  }
}

async function queueFinalMessage(message) {
  const capture = message.capture;
  if (!capture || typeof capture.text !== "string" || typeof capture.conversation_id !== "string" || !capture.conversation_id) return;
  const frame = finalMessageFrame({
    id: crypto.randomUUID(),
    platform: message.platform,
    capture,
    method: message.method === "dom" ? "dom" : "network",
    pageUrl: message.page_url,
    title: message.title,
    observedAt: message.observed_at,
  });
  if (new TextEncoder().encode(JSON.stringify(frame)).length > MAX_FRAME_BYTES) {
    // The server refuses it (SPEC §6 too_large); kept, it would be resent forever.
    await session.set("lastRejected", { id: frame.id, code: "too_large", detail: "the message is over 1 MiB", at: Date.now() });
    return;
  }
  if (observedAt.size >= MAX_OBSERVED) observedAt.clear();
  observedAt.set(frame.id, Date.parse(frame.observed_at) || Date.now());
  try {
    await outbox.add(frame);
  } catch (error) {
    // Storage refused it (full, or the browser is shutting down): send it
    // once now rather than lose it; it is not resent after a reconnect.
    console.warn("Conductor: the outbox could not keep a message:", error);
    await ensureConnected();
    if (send(frame)) sentOnSocket.add(frame.id);
    return;
  }
  await ensureConnected();
  await flush();
}

const MESSAGE_HANDLERS = {
  async "content.settings"(message, sender) {
    if (!sender.tab) return null;
    const { settings } = await chrome.storage.local.get("settings");
    return { readStreams: settings?.readStreams !== false, insertGuide: settings?.insertGuide === true };
  },
  /**
   * A new chat's page asks for its platform's guide (the "insert into every
   * new conversation" option). Refused for a page showing a conversation:
   * the option never touches an existing one.
   */
  async "content.guide"(message, sender) {
    if (!isFromPlatform(sender, message.platform)) return { ok: false, error: "not a page of that platform" };
    // The page's own URL, from its content script: `sender.url` stays the
    // loaded one when the app moves to another chat without loading a page.
    const pageUrl = String(message.page_url ?? "");
    if (adapterForUrl(pageUrl)?.name !== message.platform) return { ok: false, error: "not a page of that platform" };
    if (adapterByName(message.platform).conversationIdFromUrl(pageUrl)) return { ok: false, error: "the page shows an existing conversation" };
    try {
      await ensureConnected();
      for (const started = Date.now(); !isHelloAcknowledged && socket && Date.now() - started < NEW_CHAT_CONNECT_MS; ) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return { ok: true, ...(await requestGuide({ platform: message.platform, conversationId: null })) };
    } catch (error) {
      return { ok: false, error: error.message };
    }
  },
  async "popup.insert_guide"(message, sender) {
    if (!isFromExtensionPage(sender)) return null;
    if (!Number.isInteger(message.tab_id)) return { ok: false, error: "no active tab" };
    return insertGuideIntoTab(message.tab_id);
  },
  async "content.final_message"(message, sender) {
    if (isFromPlatform(sender, message.platform)) await queueFinalMessage(message);
    return null;
  },
  async "content.adapter_report"(message, sender) {
    if (!isFromPlatform(sender, message.platform)) return null;
    await countReport({ platform: message.platform, adapter: adapterByName(message.platform).version, kind: message.kind, detail: message.detail });
    return null;
  },
  async "content.ready"(_message, sender) {
    if (sender.tab?.id !== undefined) tabWaiters.get(sender.tab.id)?.();
    return null;
  },
  async "popup.reconnect"(_message, sender) {
    if (sender.tab) return null; // the extension's own pages only
    await chrome.storage.session.remove("holdOff");
    attempt = 0;
    disconnect();
    await ensureConnected();
    return null;
  },
};

chrome.runtime.onMessage.addListener((message, sender, sendResponse) => {
  const type = message?.type;
  if (typeof type !== "string" || !Object.hasOwn(MESSAGE_HANDLERS, type)) return false;
  MESSAGE_HANDLERS[type](message, sender).then(sendResponse, (error) => {
    console.warn("Conductor: a message failed:", type, error);
    sendResponse(null);
  });
  return true;
});

chrome.storage.onChanged.addListener((changes, area) => {
  if (area !== "local" || !("settings" in changes || "paused" in changes)) return;
  (async () => {
    if ("settings" in changes) await chrome.storage.session.remove("holdOff");
    attempt = 0;
    disconnect();
    await ensureConnected();
  })();
});

chrome.runtime.onStartup.addListener(() => ensureConnected());
chrome.runtime.onInstalled.addListener(() => ensureConnected());
chrome.alarms.onAlarm.addListener((alarm) => {
  if (alarm.name === RECONNECT_ALARM) ensureConnected();
  if (alarm.name === REPORTS_ALARM) withReports(sendDueReports);
});
chrome.alarms.get(REPORTS_ALARM).then((alarm) => {
  if (!alarm) chrome.alarms.create(REPORTS_ALARM, { periodInMinutes: 1 });
});
chrome.alarms.get(RECONNECT_ALARM).then((alarm) => {
  if (!alarm) chrome.alarms.create(RECONNECT_ALARM, { periodInMinutes: 1 });
});

ensureConnected();
