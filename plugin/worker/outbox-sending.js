/**
 * The final messages not yet acknowledged (SPEC §9): kept in
 * chrome.storage.local (lib/outbox.js), sent oldest first on each socket,
 * dropped on `ack` or on an error that says the server will never take
 * them, sent again later after one that says it may.
 */

import { reconnectDelay } from "../lib/backoff.js";
import { finalMessageFrame, isOverFrameLimit } from "../lib/frames.js";
import { Outbox, refusedFrameAction } from "../lib/outbox.js";
import { ensureConnected, forgetSentOnSocket, isSentOnSocket, markSentOnSocket, send } from "./socket.js";
import { recordAckLatency } from "./connection-status.js";
import { local, session } from "./storage.js";

/** Spacing of resent frames, under the server's per-connection frame limit (50/s by default). */
const RESEND_SPACING_MS = 40;
/** Observation times kept for frames not yet acknowledged (the outbox drops some unacknowledged). */
const MAX_OBSERVED = 1000;

const outbox = new Outbox(local, { key: "outbox", limit: 200 });
/** When each unacknowledged frame was observed, for the ack latency shown in the popup. */
const observedAt = new Map();
/** Refusals counted per frame, for the growing delay (reset by its ack). */
const refusals = new Map();
let isFlushing = false;
let isFlushAgain = false;

/** Sends the outbox's frames not yet sent on this socket, oldest first, spaced out. */
export async function flush() {
  if (isFlushing) {
    isFlushAgain = true;
    return;
  }
  isFlushing = true;
  try {
    do {
      isFlushAgain = false;
      for (const frame of await outbox.pending()) {
        if (isSentOnSocket(frame.id)) continue;
        if (!send(frame)) return;
        markSentOnSocket(frame.id);
        if (!observedAt.has(frame.id)) observedAt.set(frame.id, Date.parse(frame.observed_at) || Date.now());
        await new Promise((resolve) => setTimeout(resolve, RESEND_SPACING_MS));
      }
    } while (isFlushAgain);
  } finally {
    isFlushing = false;
  }
}

/** A content script's capture, as a `browser.final_message` kept until acknowledged and sent. */
export async function queueFinalMessage(message) {
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
  if (isOverFrameLimit(frame)) {
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
    if (send(frame)) markSentOnSocket(frame.id);
    return;
  }
  await ensureConnected();
  await flush();
}

/** The server's `ack` of frame `id`: it leaves the outbox, and its latency is kept. */
export async function acknowledged(id) {
  refusals.delete(id);
  await outbox.ack(id);
  const observed = observedAt.get(id);
  observedAt.delete(id);
  if (observed !== undefined) await recordAckLatency(id, Date.now() - observed);
}

/** The server's `error` about a kept frame: dropped, or sent again after a delay that grows with each refusal. */
export async function refused(frame) {
  if (typeof frame.id !== "string") return;
  const action = refusedFrameAction(frame.code);
  if (action === "drop") {
    await outbox.ack(frame.id);
    observedAt.delete(frame.id);
    await session.set("lastRejected", { id: frame.id, code: frame.code, detail: String(frame.detail ?? ""), at: Date.now() });
  } else if (action === "retry") {
    const attempt = refusals.get(frame.id) ?? 0;
    if (attempt === 0 && refusals.size >= MAX_OBSERVED) refusals.clear();
    refusals.set(frame.id, attempt + 1);
    setTimeout(() => {
      forgetSentOnSocket(frame.id);
      flush();
    }, 1000 + reconnectDelay(attempt));
  }
}
