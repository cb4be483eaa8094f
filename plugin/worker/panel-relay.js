/**
 * The side panel's half of the worker (SPEC §9, "What happens in the chat,
 * seen from the chat"): `status.get` and `conversation.pause` / `resume`
 * asked for the panel (worker/questions.js), `instruction.status` passed on to
 * the extension's open pages, the count of blocks waiting for approval kept
 * in chrome.storage.session (`approvalsWaiting`) and shown on the badge, and
 * a notification when a block starts waiting, with the option on, and the
 * notes on answers their app withdrew (`answerNotes` in
 * chrome.storage.session, lib/answer-notes.js), which the panel shows.
 *
 * The worker passes frames on as they came; the panel cleans every string
 * (lib/panel.js). Pages are told by `chrome.runtime.sendMessage`, which
 * reaches every open extension page; no page open is not an error.
 */

import { adapterByName } from "../adapters/index.js";
import { answerNoteOf, withNote } from "../lib/answer-notes.js";
import { answerOf } from "../lib/answers.js";
import { ApprovalWatch, approvalNotification, approvalsListUrl, approvalsWaitingNotification } from "../lib/approvals.js";
import { countOf, safeApproveUrl } from "../lib/panel.js";
import { answers, ask } from "./questions.js";
import { showBadge } from "./connection-status.js";
import { local, session } from "./storage.js";

/** The notifications whose click opens an approval page, newest last. */
const MAX_NOTIFICATION_LINKS = 20;
/** A conversation id longer than this is not asked about. */
const MAX_CONVERSATION_ID_CHARS = 200;

const approvals = new ApprovalWatch(session);

/**
 * The order in which this worker received the socket's `status` answers and
 * `instruction.status` frames. A panel asking `status.get` keeps the pushes
 * that reach it meanwhile and applies only those received after the answer:
 * the answer already holds the earlier ones, and the socket keeps the
 * server's order, which the pages' messages need not.
 */
let received = 0;
const RECEIVED = Symbol("received");

/** The socket's `status` frame, marked with its place among the frames before it is handed to its question. */
export function onStatusAnswer(frame) {
  answers.answer(Object.assign(frame, { [RECEIVED]: ++received }));
}

/** Tells the extension's open pages (the side panel) something; none open is fine. */
function tellPages(message) {
  chrome.runtime.sendMessage(message).catch(() => {});
}

/** Keeps the server's count of the owner's blocks waiting for approval, when it is one, and shows it. */
export async function setApprovalsWaiting(value) {
  const count = countOf(value);
  if (count === null) return;
  await session.set("approvalsWaiting", count);
  await showBadge();
}

/**
 * The socket's `hello.ok`: the count it carries (0 from a server that does
 * not count), and the open panels asked to read their conversation again,
 * as pushes may have been missed while the socket was down.
 */
export async function onConnected(frame) {
  await setApprovalsWaiting(countOf(frame.approvals_waiting) ?? 0);
  tellPages({ type: "worker.connected" });
}

/** The server's `instruction.status`: the count, the open panels, and a notification for a block that starts waiting. */
export async function onInstructionStatus(frame) {
  const order = ++received;
  if (typeof frame.platform !== "string" || typeof frame.conversation_id !== "string" || typeof frame.message !== "object" || !frame.message) return;
  // Passed on before anything is awaited, so the pages get the frames in the socket's order.
  tellPages({ type: "worker.instruction_status", frame, received: order });
  await setApprovalsWaiting(frame.approvals_waiting);
  const started = await approvals.started(frame);
  if (started.length && (await isNotifying())) {
    for (const block of started) await notify(block, frame);
  }
}

/**
 * The server's `approvals.waiting`: the owner's count changed while the
 * panel looks at none of the change (its conversation's `instruction.status`
 * would have carried it). A count that grew is a block that starts waiting
 * in a conversation not looked at: notified with a link to the approvals list.
 */
export async function onApprovalsWaiting(frame) {
  const count = countOf(frame.count);
  if (count === null) return;
  const before = (await session.get("approvalsWaiting")) ?? 0;
  await setApprovalsWaiting(count);
  if (count <= before || !(await isNotifying())) return;
  const { settings } = await chrome.storage.local.get("settings");
  await notifyLink(approvalsWaitingNotification(count), approvalsListUrl(settings?.serverUrl));
}

/** Whether the option "Notify me when a block waits for approval" is on, and Chrome still grants it. */
async function isNotifying() {
  if ((await local.get("notifyApprovals")) !== true) return false;
  return chrome.permissions.contains({ permissions: ["notifications"] }).catch(() => false);
}

async function notify(block, frame) {
  const { settings } = await chrome.storage.local.get("settings");
  await notifyLink(approvalNotification(block, frame), safeApproveUrl(block.approveUrl, settings?.serverUrl));
}

/** A notification whose click opens `url` (null: none). */
async function notifyLink({ title, message }, url) {
  const id = `approval-${crypto.randomUUID()}`;
  if (url) {
    const links = ((await session.get("notificationLinks")) ?? []).slice(-(MAX_NOTIFICATION_LINKS - 1));
    await session.set("notificationLinks", [...links, { id, url }]);
  }
  await chrome.notifications.create(id, { type: "basic", iconUrl: chrome.runtime.getURL("icons/128.png"), title, message, priority: 1 });
}

/** A click on an approval's notification opens its approval page (on the paired server, `safeApproveUrl`). */
export async function onNotificationClicked(id) {
  const link = ((await session.get("notificationLinks")) ?? []).find((kept) => kept.id === id);
  if (!link) return;
  await chrome.tabs.create({ url: link.url });
  await chrome.notifications.clear(id);
}

/**
 * What a panel asks about, checked: a platform the plugin knows and a
 * conversation id. Null when either is not.
 */
function conversationOf(message) {
  try {
    adapterByName(message.platform);
  } catch {
    return null;
  }
  const id = message.conversation_id;
  if (typeof id !== "string" || !id || id.length > MAX_CONVERSATION_ID_CHARS) return null;
  return { platform: message.platform, conversation_id: id };
}

/**
 * The side panel's `status.get`: the conversation's last messages with
 * blocks, and the paired server (the approval links open there only).
 *
 * @returns {Promise<{ok: true, status: any, received: number, server_url: string} | {ok: false, error: string}>}
 *   `received`: where the answer came among the frames passed on to the pages (`onStatusAnswer`)
 */
export async function conversationStatus(message) {
  const conversation = conversationOf(message);
  if (!conversation) return { ok: false, error: "not a conversation of a chat the plugin knows" };
  try {
    const status = answerOf(await ask((id) => ({ type: "status.get", id, ...conversation })), "status");
    await setApprovalsWaiting(status.approvals_waiting);
    const { settings } = await chrome.storage.local.get("settings");
    return { ok: true, status, received: status[RECEIVED] ?? 0, server_url: String(settings?.serverUrl ?? "") };
  } catch (error) {
    return { ok: false, error: error.message };
  }
}

/**
 * The side panel's Pause / Resume: `conversation.pause` or `resume`,
 * answered by an `ack` saying whether the conversation is paused now.
 *
 * @returns {Promise<{ok: true, paused: boolean} | {ok: false, error: string}>}
 */
export async function pauseConversation(message) {
  const conversation = conversationOf(message);
  if (!conversation) return { ok: false, error: "not a conversation of a chat the plugin knows" };
  const type = message.paused === true ? "conversation.pause" : "conversation.resume";
  try {
    const ack = answerOf(await ask((id) => ({ type, id, ...conversation })), "ack");
    return { ok: true, paused: ack.paused === true };
  } catch (error) {
    return { ok: false, error: error.message };
  }
}

/** One change of the notes at a time, so that no note is lost to two read-modify-writes at once. */
let notesTurn = Promise.resolve();

/**
 * A content script says its app withdrew an answer (lib/capture.js
 * `withdrawn`): noted for that conversation's side panel, which follows
 * the change in chrome.storage.session. Anything else is ignored.
 */
export function noteWithdrawnAnswer(message) {
  const note = answerNoteOf(message, Date.now());
  if (!note || !conversationOf(note)) return notesTurn;
  notesTurn = notesTurn
    .then(async () => session.set("answerNotes", withNote(await session.get("answerNotes"), note)))
    .catch((error) => console.warn("Conductor: a withdrawn answer's note was not kept:", error));
  return notesTurn;
}
