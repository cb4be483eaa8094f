/**
 * Blocks waiting for approval, as the plugin tells the person of them (SPEC
 * §9): the count on the badge (lib/status.js's `badgeOf`) and, with the
 * option on, a notification when a block starts waiting. Approving itself
 * stays in the admin, behind a staff login.
 */

import { cleanText, messageStatusOf, toolName } from "./panel.js";
import { serialisedUpdates } from "./serialised.js";

/** Blocks remembered as waiting, so each start is notified once; the oldest are forgotten first. */
export const MAX_REMEMBERED = 200;

/** The notification's text lengths (Chrome cuts longer ones anyway). */
const MAX_TITLE_CHARS = 80;
const MAX_MESSAGE_CHARS = 200;

/**
 * Which blocks of the `instruction.status` frames start waiting for
 * approval: a block not seen waiting before. A block that stops waiting is
 * forgotten, so one that waits again (a retry holds it for approval again)
 * is told of again. Kept in a `store` (chrome.storage.session), so a
 * restarted worker does not tell of a block twice; calls are serialised.
 */
export class ApprovalWatch {
  /** @param {import('./serialised.js').Store} store @param {{key?: string, limit?: number}} [options] */
  constructor(store, { key = "approvalsSeen", limit = MAX_REMEMBERED } = {}) {
    this.limit = limit;
    this.update = serialisedUpdates(store, key, (stored) => ({ keys: Array.isArray(stored?.keys) ? stored.keys.filter((k) => typeof k === "string") : [] }));
  }

  /**
   * @param {any} frame an `instruction.status` frame
   * @returns {Promise<import('./panel.js').Block[]>} its blocks that start waiting now
   */
  started(frame) {
    const message = messageStatusOf(frame?.message);
    if (!message) return Promise.resolve([]);
    return this.update((seen) => {
      const started = [];
      message.blocks.forEach((block, position) => {
        const key = `${message.conductorMessageId}:${block.index ?? `#${position}`}`;
        const at = seen.keys.indexOf(key);
        if (block.status !== "waiting_approval") {
          if (at >= 0) seen.keys.splice(at, 1);
        } else if (at < 0) {
          seen.keys.push(key);
          started.push(block);
        }
      });
      seen.keys.splice(0, Math.max(0, seen.keys.length - this.limit));
      return started;
    }, true);
  }
}

/**
 * The notification of a block that starts waiting: text only (Chrome shows
 * a notification's strings as they are, never as HTML), cleaned and bounded
 * like the panel's.
 *
 * @param {import('./panel.js').Block} block
 * @param {{platform?: unknown}} frame
 * @returns {{title: string, message: string}}
 */
export function approvalNotification(block, frame) {
  const platform = cleanText(frame?.platform, 40, { isOneLine: true }) || "a chat";
  const title = cleanText(`${toolName(block)} waits for approval`, MAX_TITLE_CHARS, { isOneLine: true });
  const params = block.paramsPreview ? ` ${block.paramsPreview}` : "";
  const message = cleanText(`In a ${platform} conversation.${params} Approve it in Conductor (the side panel links to it).`, MAX_MESSAGE_CHARS, { isOneLine: true });
  return { title, message };
}

/** The admin's list of the tasks waiting for approval. */
const APPROVALS_PATH = "/admin/automation/automationtask/?status__exact=blocked";

/**
 * The notification of a count that grew in a conversation the side panel
 * does not look at (`approvals.waiting`: the server says only the count).
 *
 * @param {number} count the owner's blocks waiting for approval
 * @returns {{title: string, message: string}}
 */
export function approvalsWaitingNotification(count) {
  const blocks = count === 1 ? "1 block waits" : `${count} blocks wait`;
  return { title: `${blocks} for approval`, message: "In a conversation the side panel does not show. Approve in Conductor's list of tasks waiting for approval." };
}

/**
 * The approvals list on the paired server, or null when its address is not
 * a web address.
 *
 * @param {unknown} serverUrl
 * @returns {string | null}
 */
export function approvalsListUrl(serverUrl) {
  try {
    const server = new URL(String(serverUrl));
    if (server.protocol !== "http:" && server.protocol !== "https:") return null;
    return server.origin + APPROVALS_PATH;
  } catch {
    return null;
  }
}
