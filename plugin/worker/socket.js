/**
 * The WebSocket to the server (SPEC §6): `hello`, a `ping` every 20 s that
 * also notices a silent socket, reconnecting with backoff, holding off after
 * a refused token or a takeover. Frames received go to the handlers given
 * to `listen`; whoever waits for an answer is told through `onGone` when
 * the socket goes.
 *
 * An MV3 worker is stopped when idle and its timers die with it: every start
 * calls `ensureConnected`, and the ping keeps a connected worker alive
 * (Chrome 116+; in Firefox, the API call made beside it).
 */

import { ADAPTERS } from "../adapters/index.js";
import { reconnectDelay } from "../lib/backoff.js";
import { connectionBlock, holdOffAfterClose, isSilent, PING_MS, reconnectingStatus } from "../lib/connection.js";
import { helloFrame, socketUrl } from "../lib/frames.js";
import { session } from "./storage.js";
import { countAttempt, setStatus } from "./connection-status.js";

const VERSION = chrome.runtime.getManifest().version;

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
/** @type {Record<string, (frame: any) => Promise<void>>} */
let frameHandlers = {};
/** @type {(reason: string) => void} */
let onGone = () => {};
/** @type {() => Promise<unknown>} */
let beforeHello = async () => {};

/**
 * Where frames go, by `type` (one handler each, unknown types ignored), and
 * who is told when the socket goes (`gone(reason)`); `ready()` is awaited
 * before connecting (the adapters the hello names must be in force).
 *
 * @param {{handlers: Record<string, (frame: any) => Promise<void>>, gone: (reason: string) => void, ready?: () => Promise<unknown>}} listeners
 */
export function listen({ handlers, gone, ready = async () => {} }) {
  frameHandlers = handlers;
  onGone = gone;
  beforeHello = ready;
}

/** Connects unless connected, connecting, paused, refused or not configured. Safe to call often. */
export function ensureConnected() {
  ensuring ??= connectIfDue().finally(() => {
    ensuring = null;
  });
  return ensuring;
}

async function connectIfDue() {
  await beforeHello().catch(() => {}); // without the sites' descriptions the hello names the three
  if (socket || retryTimer) return;
  const { settings, paused } = await chrome.storage.local.get(["settings", "paused"]);
  const block = connectionBlock({ settings, paused, holdOff: await session.get("holdOff") });
  if (block) return setStatus(block.state, block.detail);
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
    // Firefox: its background page is stopped after 30 s without an extension
    // API call, whatever its socket does (Chrome counts the socket's traffic).
    // One cheap call each ping keeps a connected page alive.
    chrome.runtime.getPlatformInfo().catch(() => {});
    if (isSilent(lastHeardAt, Date.now())) {
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
    if (frame && typeof frame.type === "string" && Object.hasOwn(frameHandlers, frame.type)) {
      frameHandlers[frame.type](frame).catch((error) => console.warn("Conductor: a frame failed:", frame.type, error));
    }
  };
  ws.onclose = (event) => {
    if (ws === socket) onClosed(event.code).catch((error) => console.warn("Conductor: close handling failed:", error));
  };
}

async function onClosed(code) {
  const wasReached = isHelloAcknowledged;
  socket = null;
  isHelloAcknowledged = false;
  clearInterval(pingTimer);
  onGone("the connection to the server closed before it answered");
  const holdOff = holdOffAfterClose(code);
  if (holdOff) {
    await session.set("holdOff", holdOff);
    return setStatus(holdOff.state, holdOff.detail);
  }
  const delay = reconnectDelay(attempt++);
  const status = reconnectingStatus(code, { wasReached, delayMs: delay });
  await setStatus(status.state, status.detail, status.reason);
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
  onGone("the connection to the server was closed (new options or a pause)");
}

/** Drops the socket and connects again at once, the backoff started over (new options, the popup's "Reconnect"). */
export async function reconnect() {
  attempt = 0;
  disconnect();
  await ensureConnected();
}

/**
 * The server took the hello (`hello.ok`): frames may go now, and the
 * backoff starts over. SPEC §9: a `plugin_outdated` plugin is still
 * connected, but the person should update it (badge, popup, options page).
 */
export async function helloAcknowledged(frame) {
  isHelloAcknowledged = true;
  attempt = 0;
  const isOutdated = frame.plugin_outdated === true;
  await session.set("pluginOutdated", isOutdated);
  if (isOutdated) {
    await setStatus("connected", "this plugin is older than the server supports: update it", "outdated");
  } else {
    await setStatus("connected");
  }
}

/** Waits up to `timeoutMs` for a socket being opened to have its hello taken. */
export async function waitForHello(timeoutMs) {
  for (const started = Date.now(); !isHelloAcknowledged && socket && Date.now() - started < timeoutMs; ) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Sends `frame` when the hello was taken; false when it was not sent. */
export function send(frame) {
  if (!socket || socket.readyState !== WebSocket.OPEN || !isHelloAcknowledged) return false;
  socket.send(JSON.stringify(frame));
  return true;
}

/** Whether frame `id` went out on this socket already (the outbox sends each once per socket). */
export function isSentOnSocket(id) {
  return sentOnSocket.has(id);
}

export function markSentOnSocket(id) {
  sentOnSocket.add(id);
}

/** Lets frame `id` go again on this socket (a refusal the server may take back later). */
export function forgetSentOnSocket(id) {
  sentOnSocket.delete(id);
}
