/**
 * Proxy and DOM deliveries (`browser.proxy_delivery`, `browser.dom_delivery`):
 * the frame checked against the adapter's rules before any tab
 * (lib/delivery-rules.js), then handed to the content script of a tab
 * showing the conversation, opened when none is; each `delivery_key` once
 * (lib/deliveries.js), the result sent back, a failure that says something
 * about the site counted as an adapter report.
 */

import { adapterByName, NETWORK_ADAPTERS } from "../adapters/index.js";
import { clampTimeout } from "../lib/composer.js";
import { Deliveries, DELIVERY_KINDS } from "../lib/deliveries.js";
import { DeliveryMemory } from "../lib/delivery-memory.js";
import { frameRefusal } from "../lib/delivery-rules.js";
import { domResultFrame, proxyResultFrame } from "../lib/frames.js";
import { afterProxyDelivery } from "../lib/reply-note.js";
import { reportDeliveryFailure } from "./report-sending.js";
import { isSiteOn } from "./site-sync.js";
import { send } from "./socket.js";
import { local } from "./storage.js";

/** How long a tab opened for a delivery may take to load its content script. */
const OPEN_TAB_MS = 30_000;
/** How long after a tab finished loading its content script may take to say it is ready. */
const RELOAD_AFTER_MS = 2_000;
/** How long past its own timeout a tab's content script may take to answer a DOM delivery. */
const DOM_ANSWER_MARGIN_MS = 5_000;

const deliveries = new Deliveries(new DeliveryMemory(local, { key: "deliveries" }));
/** Tabs opened for a delivery, waiting for their content script: tab id -> resolve. */
const tabWaiters = new Map();

/**
 * The delivery frame refused before anything is looked up or opened (a
 * forged frame, or a request the adapter may not make), or null. Logged:
 * no real server sends one, so each is worth a look.
 *
 * @param {any} frame
 * @param {import('../lib/deliveries.js').DeliveryKind} kind
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

/**
 * Sends `message` to the content script of a tab showing the frame's
 * conversation, opening one when none is open.
 *
 * @param {any} frame
 * @param {any} message
 * @param {import('../lib/deliveries.js').DeliveryKind} kind
 * @param {(tabId: number, answer: any) => void} [onAnswer] told which tab answered, and what
 */
async function deliverInTab(frame, message, kind, onAnswer = () => {}) {
  let adapter;
  try {
    adapter = adapterByName(frame.platform);
  } catch (error) {
    return kind.failed(error.message);
  }
  // A site the person has not switched on (or switched off since) is not typed into, nor is a tab of it opened.
  if (!NETWORK_ADAPTERS.includes(adapter) && !(await isSiteOn(adapter.name))) {
    return kind.failed(`${adapter.description?.title ?? adapter.name} is switched off in the plugin's options: nothing is read or typed there`);
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

/** @returns {Promise<import('../lib/frames.js').ProxyResult>} */
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
 * @returns {Promise<import('../lib/composer.js').DomResult>}
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

/** A tab's content script is ready: a delivery waiting for that tab goes on. */
export function tabReady(tabId) {
  tabWaiters.get(tabId)?.();
}

/**
 * The handler of one delivery frame type: the frame refused or delivered,
 * the result sent back, a failure reported.
 *
 * @param {import('../lib/deliveries.js').DeliveryKind} kind
 * @param {(frame: any) => Promise<any>} perform
 * @param {(requestId: string, result: any) => any} resultFrame
 * @param {"http" | "dom"} method
 */
function deliveryHandler(kind, perform, resultFrame, method) {
  return async (frame) => {
    const result = refusedDelivery(frame, kind) ?? (await deliveries.deliver(frame, kind, perform));
    send(resultFrame(String(frame.request_id), result));
    reportDeliveryFailure(frame, result, method);
  };
}

export const onProxyDelivery = deliveryHandler(DELIVERY_KINDS.proxy, performProxyDelivery, proxyResultFrame, "http");
export const onDomDelivery = deliveryHandler(DELIVERY_KINDS.dom, performDomDelivery, domResultFrame, "dom");
