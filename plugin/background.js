/**
 * Conductor's service worker: holds the WebSocket to the server (SPEC §6),
 * keeps the outbox of final messages not yet acknowledged, performs proxy
 * and DOM deliveries through a tab of the conversation, asks the server for
 * the tool guide and puts it into a tab's composer, asks and follows what
 * became of a conversation's blocks for the side panel, and shows the
 * connection and the blocks waiting for approval on the badge, and keeps
 * the chat sites read from the page (their descriptions from the server,
 * their content scripts where the person switched them on). Each of
 * those is a module of `worker/`; this file wires them to the socket's
 * frames, the extension's messages and the browser's events.
 *
 * An MV3 worker is stopped when idle and its timers die with it, so what must
 * survive lives in chrome.storage: the settings, the outbox and the delivery
 * memory in `local`, the connection's state in `session`. Every start (the
 * browser's, an alarm's, a content script's message) begins by reconnecting
 * if it should; the `ping` every 20 s keeps a connected worker alive
 * (Chrome 116+).
 */

import { adapterByName, NETWORK_ADAPTERS } from "./adapters/index.js";
import { onDomDelivery, onProxyDelivery, tabReady } from "./worker/delivering.js";
import { answers } from "./worker/questions.js";
import { guideForNewChat, insertGuideIntoTab } from "./worker/guide-requests.js";
import { acknowledged, flush, queueFinalMessage, refused } from "./worker/outbox-sending.js";
import {
  conversationStatus, noteWithdrawnAnswer, onConnected, onApprovalsWaiting, onInstructionStatus, onNotificationClicked, onStatusAnswer, pauseConversation,
} from "./worker/panel-relay.js";
import { countReport, sendDueReports } from "./worker/report-sending.js";
import { descriptionForPage, isSiteOn, refreshSites, sitesReady, switchSite, syncScripts, takeSites } from "./worker/site-sync.js";
import { ensureConnected, helloAcknowledged, listen, reconnect } from "./worker/socket.js";
import { quietMsOf } from "./lib/turn-watch.js";

const RECONNECT_ALARM = "conductor-reconnect";
/** Sends the adapter reports that came due while nothing else happened. */
const REPORTS_ALARM = "conductor-reports";

// ---- frames from the server -------------------------------------------------

const FRAME_HANDLERS = {
  async "hello.ok"(frame) {
    await helloAcknowledged(frame);
    await onConnected(frame);
    await flush();
    await sendDueReports();
    // Not awaited: its question waits for an answer the next frames bring.
    refreshSites(frame).catch((error) => console.warn("Conductor: the server's site descriptions were not taken:", error));
  },
  async ack(frame) {
    if (answers.answer(frame)) return; // the answer to a conversation.pause or resume
    if (typeof frame.id === "string") await acknowledged(frame.id);
  },
  async pong() {},
  async guide(frame) {
    answers.answer(frame);
  },
  async status(frame) {
    onStatusAnswer(frame);
  },
  async sites(frame) {
    if (answers.answer(frame)) return; // the answer to sites.get, taken by refreshSites
    await takeSites(frame); // sent unasked: an operator changed a site
  },
  async error(frame) {
    if (answers.answer(frame)) return; // the answer to a question (guide.get, status.get, ...)
    await refused(frame);
  },
  "instruction.status": onInstructionStatus,
  // The owner's count alone, when it changed and this socket's panel looks at none of the change.
  "approvals.waiting": onApprovalsWaiting,
  "browser.proxy_delivery": onProxyDelivery,
  "browser.dom_delivery": onDomDelivery,
};

// The hello names the adapters in force, the sites' among them: it waits for their descriptions.
listen({ handlers: FRAME_HANDLERS, gone: (reason) => answers.failAll(reason), ready: () => sitesReady });

// ---- messages from the content scripts and the extension's pages -------------

/** Is the sender one of the extension's own pages (the popup, the options, the side panel), not a content script? */
function isFromExtensionPage(sender) {
  return sender.id === chrome.runtime.id && typeof sender.url === "string" && sender.url.startsWith(chrome.runtime.getURL(""));
}

/**
 * Is the sender a content script on one of this platform's pages, and is the
 * platform read: one of the adapters with network capture, or a site the
 * person switched on (a script left from before a switch-off is not heard)?
 */
async function isFromPlatform(sender, platform) {
  if (sender.id !== chrome.runtime.id || !sender.tab || !sender.url) return false;
  let adapter;
  try {
    adapter = adapterByName(platform);
    if (!adapter.origins.includes(new URL(sender.url).origin)) return false;
  } catch {
    return false;
  }
  return NETWORK_ADAPTERS.includes(adapter) || isSiteOn(adapter.name);
}

const MESSAGE_HANDLERS = {
  async "content.settings"(message, sender) {
    if (!sender.tab) return null;
    const { settings } = await chrome.storage.local.get("settings");
    return { readStreams: settings?.readStreams !== false, insertGuide: settings?.insertGuide === true, answerQuietMs: quietMsOf(settings?.answerQuietMs) };
  },
  /** A new chat's page asks for its platform's guide (the "insert into every new conversation" option). */
  async "content.guide"(message, sender) {
    if (!(await isFromPlatform(sender, message.platform))) return { ok: false, error: "not a page of that platform" };
    // The page's own URL, from its content script: `sender.url` stays the
    // loaded one when the app moves to another chat without loading a page.
    return guideForNewChat(message.platform, String(message.page_url ?? ""));
  },
  async "popup.insert_guide"(message, sender) {
    if (!isFromExtensionPage(sender)) return null;
    if (!Number.isInteger(message.tab_id)) return { ok: false, error: "no active tab" };
    return insertGuideIntoTab(message.tab_id);
  },
  async "panel.status"(message, sender) {
    if (!isFromExtensionPage(sender)) return null;
    return conversationStatus(message);
  },
  async "panel.pause"(message, sender) {
    if (!isFromExtensionPage(sender)) return null;
    return pauseConversation(message);
  },
  async "content.final_message"(message, sender) {
    if (await isFromPlatform(sender, message.platform)) await queueFinalMessage(message);
    return null;
  },
  /** An answer its app withdrew (moderation, a refusal): nothing was sent, and the side panel says so. */
  async "content.answer_withdrawn"(message, sender) {
    if (await isFromPlatform(sender, message.platform)) await noteWithdrawnAnswer(message);
    return null;
  },
  async "content.adapter_report"(message, sender) {
    if (!(await isFromPlatform(sender, message.platform))) return null;
    await countReport({ platform: message.platform, adapter: adapterByName(message.platform).version, kind: message.kind, detail: message.detail });
    return null;
  },
  /** A site's page asks which description to read it with (content/main.js `startOnSite`). */
  async "content.site"(_message, sender) {
    if (sender.id !== chrome.runtime.id || !sender.tab || !sender.url) return null;
    return { description: await descriptionForPage(sender.url) };
  },
  /** The options page's "Sites": the known sites, each on or off, and the descriptions not used, once the scripts match. */
  async "options.sites"(_message, sender) {
    if (!isFromExtensionPage(sender)) return null;
    return syncScripts();
  },
  /** The options page's switch of a site, after the page asked Chrome for its origins (on) or before giving them back (off). */
  async "options.site_switch"(message, sender) {
    if (!isFromExtensionPage(sender) || typeof message.name !== "string") return null;
    return switchSite(message.name, message.isOn === true);
  },
  async "content.ready"(_message, sender) {
    if (sender.tab?.id !== undefined) tabReady(sender.tab.id);
    return null;
  },
  async "popup.reconnect"(_message, sender) {
    if (sender.tab) return null; // the extension's own pages only
    await chrome.storage.session.remove("holdOff");
    await reconnect();
    return null;
  },
};

chrome.runtime.onMessage.addListener((message, sender, sendResponse) => {
  const type = message?.type;
  if (typeof type !== "string" || !Object.hasOwn(MESSAGE_HANDLERS, type)) return false;
  // The adapters of the sites are in force once their descriptions are read.
  sitesReady.then(() => MESSAGE_HANDLERS[type](message, sender)).then(sendResponse, (error) => {
    console.warn("Conductor: a message failed:", type, error);
    sendResponse(null);
  });
  return true;
});

// ---- the browser's events ---------------------------------------------------

// chrome.storage.local holds the token and the server's site descriptions:
// no content script reads it (they ask the worker), so none may read or
// write it. A Chrome that allows this for `session` only refuses it: the
// area then stays as it was, and the content scripts still never touch it.
// Firefox has no setAccessLevel (the `?.` skips it): there its content
// scripts could read `local`. Accepted, not worked around: they run only the
// plugin's own code, in the isolated world the page cannot reach, and a
// compromised content process could read the token from the server's
// socket's memory as well; moving the token to `session` would lose the
// pairing at each browser restart.
chrome.storage.local.setAccessLevel?.({ accessLevel: "TRUSTED_CONTEXTS" }).catch(() => {});

chrome.storage.onChanged.addListener((changes, area) => {
  if (area !== "local" || !("settings" in changes || "paused" in changes)) return;
  (async () => {
    if ("settings" in changes) await chrome.storage.session.remove("holdOff");
    await reconnect();
  })();
});

// chrome.notifications is there only once the person granted it (the
// option "Notify me when a block waits for approval"): listened to at start,
// or as soon as it is granted.
let isListeningToNotifications = false;
function listenToNotificationClicks() {
  if (isListeningToNotifications || !chrome.notifications) return;
  isListeningToNotifications = true;
  chrome.notifications.onClicked.addListener((id) => {
    onNotificationClicked(id).catch((error) => console.warn("Conductor: a notification's click failed:", error));
  });
}
listenToNotificationClicks();
// A grant turns no site on by itself (lib/sites.js `sitesOn`): synced all the same, as a switch waits for it.
chrome.permissions.onAdded.addListener(() => {
  listenToNotificationClicks();
  syncScripts();
});
// A site's origins given back (the options' switch, or Chrome's own site access menu): its script goes, and its switch.
chrome.permissions.onRemoved.addListener(() => syncScripts());
chrome.runtime.onStartup.addListener(() => ensureConnected());
chrome.runtime.onInstalled.addListener(() => ensureConnected());
chrome.alarms.onAlarm.addListener((alarm) => {
  if (alarm.name === RECONNECT_ALARM) ensureConnected();
  if (alarm.name === REPORTS_ALARM) sendDueReports();
});
chrome.alarms.get(REPORTS_ALARM).then((alarm) => {
  if (!alarm) chrome.alarms.create(REPORTS_ALARM, { periodInMinutes: 1 });
});
chrome.alarms.get(RECONNECT_ALARM).then((alarm) => {
  if (!alarm) chrome.alarms.create(RECONNECT_ALARM, { periodInMinutes: 1 });
});

ensureConnected();
// The registered scripts and the sites on may have parted while the worker
// slept (a grant withdrawn in Chrome's menu, new descriptions): made to match at every start.
syncScripts();
