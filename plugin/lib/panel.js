/**
 * The side panel (SPEC §9, "What happens in the chat, seen from the chat"):
 * what became of each block of a conversation's messages and of their
 * delivery, from a `status` answer and kept current by `instruction.status`
 * frames (SPEC §6), drawn with a `document` passed in.
 *
 * Every string in those frames came from an assistant, a page or a tool
 * through the server: it is cleaned and bounded here again (`cleanText`),
 * whatever the server did, and only ever becomes a text node or an
 * attribute set with `setAttribute`, never HTML. Characters that reorder
 * text (bidi embeddings, overrides, isolates and marks such as U+202E) are
 * removed, and each such string sits in an element of its own with
 * `dir="auto"`, which the browser isolates (`unicode-bidi: isolate`), so a
 * right-to-left tool name or error cannot reorder the chips and labels
 * around it. An approval link opens on the paired server only
 * (`safeApproveUrl`).
 *
 * Messages are shown oldest first, newest last, as the chat shows them and
 * as the server sends them: the panel reads like the conversation beside it.
 * A block or a delivery that waits says why underneath (lib/waiting-for.js).
 */

import { panelTime, waitingForOf, waitingLine } from "./waiting-for.js";

/** The most messages the panel keeps (the server's `status.get` answers as many). */
export const MAX_MESSAGES = 20;
/** The most blocks of one message the panel shows. */
export const MAX_BLOCKS = 50;
/** A result preview's or an error's length. */
export const MAX_PREVIEW_CHARS = 300;
/** A block's params, on one line. */
export const MAX_PARAMS_CHARS = 120;
/** A tool's, a target's or an id's length. */
export const MAX_NAME_CHARS = 80;
/** An approval URL longer than this is not opened. */
export const MAX_URL_CHARS = 2048;

/** A block's status (SPEC §6 message status) and its chip's label. */
export const BLOCK_STATUSES = Object.freeze({
  queued: "queued",
  waiting_approval: "waiting for approval",
  running: "running",
  succeeded: "succeeded",
  failed: "failed",
  rejected: "rejected",
  cancelled: "cancelled",
});

/** A status the panel does not know (a newer server's): shown as such, never as its raw text. */
export const UNKNOWN_STATUS = "unknown";

/** A message's delivery status and what the panel says of it. */
export const DELIVERY_STATUSES = Object.freeze({
  none: "Results: none yet (blocks still open)",
  waiting: "Results: waiting to be delivered",
  running: "Results: being delivered",
  delivered: "Results delivered",
  failed: "Results not delivered",
});

const DELIVERY_METHODS = new Set(["http", "dom"]);

// Embeddings, overrides and pops (U+202A–U+202E), isolates (U+2066–U+2069),
// the directional marks (U+200E, U+200F) and the Arabic letter mark (U+061C).
const BIDI_CONTROLS = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
// C0 controls but tab and line feed, DEL, C1 controls.
const CONTROLS = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F]/g;
const LONE_SURROGATES = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * A string from the server as the panel may show it: without characters
 * that reorder text or control the terminal, lone surrogates replaced, at
 * most `limit` characters (code points; "…" ends a cut one). `isOneLine`
 * folds every run of whitespace, line breaks included, into one space.
 * Anything but a string is "".
 *
 * @param {unknown} value
 * @param {number} limit
 * @param {{isOneLine?: boolean}} [options]
 */
export function cleanText(value, limit, { isOneLine = false } = {}) {
  if (typeof value !== "string") return "";
  // Cut before cleaning, so a huge string costs no more than a short one;
  // the margin leaves room for the characters cleaning removes.
  const raw = value.length > limit * 4 ? value.slice(0, limit * 4) : value;
  let text = raw.replace(LONE_SURROGATES, "\uFFFD").replace(BIDI_CONTROLS, "").replace(/\r\n?/g, "\n").replace(CONTROLS, "");
  text = isOneLine ? text.replace(/\s+/g, " ").trim() : text.replace(/^\n+|\s+$/g, "");
  const isCut = raw !== value;
  const characters = Array.from(text);
  if (characters.length > limit || (isCut && characters.length >= limit)) return `${characters.slice(0, limit - 1).join("")}…`;
  return isCut ? `${text}…` : text;
}

/** The first line of an error, cleaned and bounded (`cleanText`); null for no error. */
export function firstLine(value, limit = MAX_PREVIEW_CHARS) {
  if (typeof value !== "string") return null;
  const line = cleanText(value.trimStart().split(/\r|\n/, 1)[0], limit, { isOneLine: true });
  return line || null;
}

/** A count from the server (`approvals_waiting`): a non-negative integer, or null when it is not one. */
export function countOf(value) {
  return Number.isSafeInteger(value) && value >= 0 ? value : null;
}

/**
 * A block of a message status, as the panel keeps it.
 *
 * @typedef {{index: number | null, target: string, tool: string, paramsPreview: string, status: string,
 *   error: string | null, resultPreview: string | null, approveUrl: string | null, updatedAt: number,
 *   waitingFor: import('./waiting-for.js').WaitingFor | null}} Block
 * @typedef {{status: string, method: string | null, error: string | null,
 *   waitingFor: import('./waiting-for.js').WaitingFor | null, resultsNotDelivered: number}} Delivery
 * @typedef {{messageId: string | null, conductorMessageId: string, blocks: Block[], delivery: Delivery}} MessageStatus
 * @typedef {{platform: string, conversationId: string, paused: boolean, messages: MessageStatus[],
 *   approvalsWaiting: number | null}} PanelState
 */

/**
 * A message status from the server (SPEC §6), cleaned and bounded; null when
 * it has no `conductor_message_id` (nothing to keep it by).
 *
 * @returns {MessageStatus | null}
 */
export function messageStatusOf(raw) {
  if (!isObject(raw)) return null;
  const conductorMessageId = cleanText(raw.conductor_message_id, MAX_NAME_CHARS, { isOneLine: true });
  if (!conductorMessageId) return null;
  const blocks = Array.isArray(raw.blocks) ? raw.blocks.slice(0, MAX_BLOCKS).map(blockOf).filter(Boolean) : [];
  return {
    messageId: cleanText(raw.message_id, MAX_NAME_CHARS, { isOneLine: true }) || null,
    conductorMessageId,
    blocks,
    delivery: deliveryOf(raw.delivery),
  };
}

/** @returns {Block | null} */
function blockOf(raw) {
  if (!isObject(raw)) return null;
  return {
    index: Number.isSafeInteger(raw.index) ? raw.index : null,
    target: cleanText(raw.target, MAX_NAME_CHARS, { isOneLine: true }) || "conductor",
    tool: cleanText(raw.tool, MAX_NAME_CHARS, { isOneLine: true }) || "(no tool)",
    paramsPreview: cleanText(raw.params_preview, MAX_PARAMS_CHARS, { isOneLine: true }),
    status: typeof raw.status === "string" && Object.hasOwn(BLOCK_STATUSES, raw.status) ? raw.status : UNKNOWN_STATUS,
    error: firstLine(raw.error),
    resultPreview: cleanText(raw.result_preview, MAX_PREVIEW_CHARS) || null,
    approveUrl: typeof raw.approve_url === "string" && raw.approve_url.length <= MAX_URL_CHARS ? raw.approve_url : null,
    updatedAt: Number.isFinite(raw.updated_at) ? raw.updated_at : 0,
    waitingFor: waitingForOf(raw.waiting_for),
  };
}

/** @returns {Delivery} */
function deliveryOf(raw) {
  const delivery = isObject(raw) ? raw : {};
  return {
    status: typeof delivery.status === "string" && Object.hasOwn(DELIVERY_STATUSES, delivery.status) ? delivery.status : "none",
    method: DELIVERY_METHODS.has(delivery.method) ? delivery.method : null,
    error: firstLine(delivery.error),
    waitingFor: waitingForOf(delivery.waiting_for),
    // Blocks retried since that delivery, whose new results a follow-up delivery carries.
    resultsNotDelivered: countOf(delivery.results_not_delivered) ?? 0,
  };
}

/**
 * The panel's state from a `status` answer to `status.get` (the last
 * messages, newest last).
 *
 * @returns {PanelState}
 */
export function panelStateOf(answer) {
  const messages = Array.isArray(answer?.messages) ? answer.messages.slice(-MAX_MESSAGES * 2).map(messageStatusOf).filter(Boolean) : [];
  return {
    platform: String(answer?.platform ?? ""),
    conversationId: String(answer?.conversation_id ?? ""),
    paused: answer?.paused === true,
    messages: messages.slice(-MAX_MESSAGES),
    approvalsWaiting: countOf(answer?.approvals_waiting),
  };
}

/** The newest change of any of a message's blocks. */
function lastChange(message) {
  return Math.max(0, ...message.blocks.map((block) => block.updatedAt));
}

/**
 * The panel's state after an `instruction.status` frame: the message it
 * carries replaces the one with its `conductor_message_id`, or comes last as
 * the newest, and the oldest go past MAX_MESSAGES. A frame about another
 * conversation (the server sends the owner's every one) changes nothing but
 * the count of approvals, which is the owner's, across conversations. A
 * message older than the one kept (its blocks changed earlier: a frame
 * replayed onto a newer answer) is not taken: the latest state wins.
 *
 * @param {PanelState} state
 * @param {any} frame
 * @returns {PanelState} `state` itself when nothing changed
 */
export function applyInstructionStatus(state, frame) {
  if (!isObject(frame) || frame.type !== "instruction.status") return state;
  const approvalsWaiting = countOf(frame.approvals_waiting) ?? state.approvalsWaiting;
  const isThisConversation = frame.platform === state.platform && frame.conversation_id === state.conversationId;
  const message = isThisConversation ? messageStatusOf(frame.message) : null;
  if (!message) return approvalsWaiting === state.approvalsWaiting ? state : { ...state, approvalsWaiting };
  const at = state.messages.findIndex((kept) => kept.conductorMessageId === message.conductorMessageId);
  if (at >= 0 && lastChange(message) < lastChange(state.messages[at])) return { ...state, approvalsWaiting };
  const messages = at >= 0 ? state.messages.with(at, message) : [...state.messages, message].slice(-MAX_MESSAGES);
  return { ...state, messages, approvalsWaiting };
}

/**
 * The URL to open for "Approve in Conductor": the approval page's path,
 * query and fragment on the paired server's origin (`serverUrl`, the
 * settings' Server URL). So a URL for another host or scheme (a proxy in
 * front of the server rewrote it, or a forged frame) opens the paired
 * server's page of the same path, and one that is not http(s) opens
 * nothing.
 *
 * @returns {string | null}
 */
export function safeApproveUrl(url, serverUrl) {
  if (typeof url !== "string" || url.length > MAX_URL_CHARS) return null;
  let approve;
  let server;
  try {
    approve = new URL(url);
    server = new URL(String(serverUrl));
  } catch {
    return null;
  }
  const isWeb = (address) => address.protocol === "http:" || address.protocol === "https:";
  if (!isWeb(approve) || !isWeb(server)) return null;
  // Joined as text, not resolved: a path of "//elsewhere" must stay a path.
  const safe = new URL(server.origin + approve.pathname + approve.search + approve.hash);
  return safe.origin === server.origin ? safe.href : null;
}

/** A block's tool as the panel names it: `target::tool` for a tool of an MCP server. */
export function toolName(block) {
  return block.target === "conductor" ? block.tool : `${block.target}::${block.tool}`;
}

/**
 * What the panel says of a message's delivery. Results delivered, and then
 * blocks retried: the retried blocks' results are not, until a follow-up
 * delivery carries them (it is `waiting` or `running` once they finish).
 */
export function deliveryText(delivery) {
  if (hasResultsNotDelivered(delivery)) {
    const count = delivery.resultsNotDelivered;
    return `${count} ${count === 1 ? "result" : "results"} not yet delivered`;
  }
  const text = DELIVERY_STATUSES[delivery.status];
  if (delivery.status === "delivered" && delivery.method) return `${text} via ${delivery.method}`;
  if (delivery.status === "failed" && delivery.error) return `${text}: ${delivery.error}`;
  return text;
}

function hasResultsNotDelivered(delivery) {
  return delivery.resultsNotDelivered > 0 && (delivery.status === "delivered" || delivery.status === "none");
}

/**
 * The messages as a list (`<ol class="messages">`), oldest first, built with
 * `document`'s `createElement`, `createTextNode`, `setAttribute` and
 * `appendChild` only.
 *
 * @param {Document} document
 * @param {PanelState} state
 * @param {{serverUrl?: string, formatTime?: (ms: number) => string}} [options] the paired server, for the
 *   approval links; how a time is written (when a backoff ends)
 */
export function renderMessages(document, state, { serverUrl = "", formatTime = panelTime } = {}) {
  const list = element(document, "ol", { class: "messages" });
  for (const message of state.messages) list.appendChild(renderMessage(document, message, { serverUrl, formatTime }));
  return list;
}

/** One message's card: its blocks and its delivery, and why the delivery waits when it does. */
export function renderMessage(document, message, { serverUrl = "", formatTime = panelTime } = {}) {
  const waiting = message.blocks.filter((block) => block.status === "waiting_approval").length;
  const summary = `${message.blocks.length} ${message.blocks.length === 1 ? "block" : "blocks"}${waiting ? `, ${waiting} waiting for approval` : ""}`;
  const card = element(document, "li", { class: "message", "data-conductor-message-id": message.conductorMessageId });
  card.appendChild(element(document, "p", { class: "message-head" },
    element(document, "span", { class: "summary" }, summary),
    element(document, "span", { class: "message-id", dir: "auto" }, message.messageId ?? message.conductorMessageId),
  ));
  const blocks = element(document, "ol", { class: "blocks" });
  for (const block of message.blocks) {
    blocks.appendChild(renderBlock(document, block, { serverUrl, formatTime, conductorMessageId: message.conductorMessageId }));
  }
  card.appendChild(blocks);
  const delivery = message.delivery;
  const shown = hasResultsNotDelivered(delivery) ? "results-not-delivered" : delivery.status;
  card.appendChild(element(document, "p", { class: `delivery delivery-${shown}`, "data-delivery": delivery.status, dir: "auto" },
    deliveryText(delivery)));
  const line = waitingLine(delivery.waitingFor, {
    conductorMessageId: message.conductorMessageId, isDelivery: true, hasFailed: Boolean(delivery.error), formatTime,
  });
  if (line) card.appendChild(renderWaitingLine(document, line, delivery.waitingFor.code, { serverUrl, isDelivery: true }));
  return card;
}

/**
 * One block: its tool, status chip, params, result or error, the approval
 * link when it waits for one, and why it waits when something else holds it.
 */
export function renderBlock(document, block, { serverUrl = "", formatTime = panelTime, conductorMessageId = "" } = {}) {
  const label = BLOCK_STATUSES[block.status] ?? UNKNOWN_STATUS;
  const item = element(document, "li", { class: `block status-${block.status}`, "data-status": block.status, "data-index": block.index });
  item.appendChild(element(document, "p", { class: "block-head" },
    element(document, "span", { class: "tool", dir: "auto" }, toolName(block)),
    element(document, "span", { class: `chip chip-${block.status}` }, label),
  ));
  if (block.paramsPreview) item.appendChild(element(document, "p", { class: "params", dir: "auto" }, block.paramsPreview));
  if (block.error) item.appendChild(element(document, "p", { class: "error", dir: "auto" }, block.error));
  else if (block.resultPreview) item.appendChild(element(document, "p", { class: "result", dir: "auto" }, block.resultPreview));
  if (block.status === "waiting_approval") {
    const href = safeApproveUrl(block.approveUrl, serverUrl);
    item.appendChild(href
      ? element(document, "a", { class: "approve", href, target: "_blank", rel: "noopener noreferrer" }, "Approve in Conductor")
      : element(document, "p", { class: "approve-elsewhere" }, "Approve it in Conductor's admin."));
  }
  const line = waitingLine(block.waitingFor, { conductorMessageId, hasFailed: Boolean(block.error), formatTime });
  if (line) item.appendChild(renderWaitingLine(document, line, block.waitingFor.code, { serverUrl }));
  return item;
}

/**
 * Why a block or a delivery waits, on a line of its own; behind a block that
 * waits for approval, a link to approve that one (on the paired server only).
 */
function renderWaitingLine(document, { text, approveUrl }, code, { serverUrl, isDelivery = false }) {
  const href = safeApproveUrl(approveUrl, serverUrl);
  const line = element(document, "p", { class: `waiting-for${isDelivery ? " delivery-waiting-for" : ""}`, "data-waiting-for": code }, text);
  if (href) {
    line.appendChild(document.createTextNode(": "));
    line.appendChild(element(document, "a", { class: "approve-ahead", href, target: "_blank", rel: "noopener noreferrer" }, "approve it"));
  }
  return line;
}

/**
 * @param {Document} document
 * @param {string} name
 * @param {Record<string, string | number | null | undefined>} attributes null and undefined are left out
 * @param {...(Node | string)} children strings become text nodes
 */
function element(document, name, attributes, ...children) {
  const node = document.createElement(name);
  for (const [attribute, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) node.setAttribute(attribute, String(value));
  }
  for (const child of children) node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  return node;
}

function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
