/**
 * Why a block or a delivery of the side panel waits: the `waiting_for` of a
 * message status (docs/protocol.md, "The side panel"), checked, and the
 * short line the panel shows for it, in the person's words. The server's
 * codes are the dispatcher's own rules; the console tells the same reasons
 * in an operator's words.
 *
 * Pure: the time a backoff ends is written by a `formatTime` passed in.
 * Nothing of the frame is copied into a sentence but numbers (an index, a
 * time): the ids are kept only to compare, and a code this plugin does not
 * know is told as such, never as its raw text.
 */

/**
 * The panel's reasons: SPEC §6's codes (`approval`, `earlier_block`, `paused`,
 * `no_plugin`, `target_busy`, `backoff`), with `earlier_block` and `paused`
 * told apart by what they name (`waitingForOf`).
 */
export const WAITING_CODES = Object.freeze([
  "approval", "dispatcher_paused", "kind_paused", "conversation_paused",
  "behind_approval", "behind_earlier", "backoff", "no_plugin", "target_busy",
]);

/** What `paused` names, as the panel's reason. */
const PAUSED = Object.freeze({
  conversation: "conversation_paused", kind: "kind_paused", dispatcher: "dispatcher_paused",
});

/** The panel's reason for a frame's `code` and what it names; UNKNOWN_WAIT for what it does not know. */
function reasonOf(raw) {
  if (raw.code === "earlier_block") return raw.approval === true ? "behind_approval" : "behind_earlier";
  if (raw.code === "paused") return Object.hasOwn(PAUSED, raw.paused) ? PAUSED[raw.paused] : UNKNOWN_WAIT;
  const plain = ["approval", "backoff", "no_plugin", "target_busy"];
  return plain.includes(raw.code) ? raw.code : UNKNOWN_WAIT;
}

/** A code from a newer server: kept as this, so the panel says it waits without saying why. */
export const UNKNOWN_WAIT = "unknown";

/** An approval URL longer than this is not kept (as lib/panel.js's MAX_URL_CHARS). */
const MAX_URL_CHARS = 2048;
/** A message id's length (as lib/panel.js's MAX_NAME_CHARS). */
const MAX_ID_CHARS = 80;

// What each code says when nothing of the frame is needed.
const PLAIN_TEXTS = Object.freeze({
  dispatcher_paused: "waits: Conductor's dispatcher is paused",
  kind_paused: "waits: this kind of task is paused in Conductor",
  conversation_paused: "waits: the conversation is paused",
  no_plugin: "waits: the plugin that delivers it is not connected",
  target_busy: "waits: another delivery to this chat is under way",
  [UNKNOWN_WAIT]: "waits (for a reason this plugin does not know)",
});

/**
 * Why a block or a delivery waits, as the panel keeps it.
 *
 * @typedef {{code: string, until: number | null, messageId: string | null, conductorMessageId: string | null,
 *   index: number | null, approveUrl: string | null}} WaitingFor
 */

/**
 * A `waiting_for` from the server, checked: null when nothing holds it back
 * (or it is not an object with a string `code`).
 *
 * @returns {WaitingFor | null}
 */
export function waitingForOf(raw) {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw) || typeof raw.code !== "string") return null;
  return {
    code: reasonOf(raw),
    until: Number.isFinite(raw.until) ? raw.until : null,
    messageId: idOf(raw.message_id),
    conductorMessageId: idOf(raw.conductor_message_id),
    index: Number.isSafeInteger(raw.index) ? raw.index : null,
    approveUrl: typeof raw.approve_url === "string" && raw.approve_url.length <= MAX_URL_CHARS ? raw.approve_url : null,
  };
}

/** An id to compare with, never shown: a non-empty string of at most MAX_ID_CHARS, or null. */
function idOf(value) {
  return typeof value === "string" && value && value.length <= MAX_ID_CHARS ? value : null;
}

/**
 * The line the panel shows under a block or a delivery that waits, and the
 * approval page to link from it (an earlier block that waits for approval only; the caller checks
 * it is on the paired server). Null when there is nothing to say: nothing
 * holds it back, or it waits for its own approval (`approval`).
 *
 * @param {WaitingFor | null} waitingFor
 * @param {{conductorMessageId?: string, isDelivery?: boolean, hasFailed?: boolean,
 *   formatTime: (ms: number) => string}} context the message it is shown in (to say "this message"),
 *   whether it is the delivery, whether its last attempt failed (a backoff is then a retry)
 * @returns {{text: string, approveUrl: string | null} | null}
 */
export function waitingLine(waitingFor, { conductorMessageId = "", isDelivery = false, hasFailed = false, formatTime }) {
  if (!waitingFor) return null;
  const { code } = waitingFor;
  // Only a block waiting for approval waits for its own: the panel shows its approval link already.
  if (code === "approval") return null;
  if (code === "behind_approval") {
    return { text: `waits for ${aheadName(waitingFor, conductorMessageId)}, which waits for your approval`, approveUrl: waitingFor.approveUrl };
  }
  if (code === "behind_earlier") return { text: `waits for ${aheadName(waitingFor, conductorMessageId)} to finish`, approveUrl: null };
  if (code === "backoff") return { text: backoffText(waitingFor.until, { isDelivery, hasFailed, formatTime }), approveUrl: null };
  return { text: PLAIN_TEXTS[code], approveUrl: null };
}

/** "block 2 of an earlier message", "block 1 of this message", "an earlier delivery". */
function aheadName({ index, conductorMessageId: ahead }, conductorMessageId) {
  const message = ahead && ahead === conductorMessageId ? "this message" : "an earlier message";
  if (index === null) return ahead && ahead === conductorMessageId ? "an earlier delivery of this message" : "an earlier delivery";
  return `block ${index} of ${message}`;
}

function backoffText(until, { isDelivery, hasFailed, formatTime }) {
  if (until === null) return hasFailed ? "waits to try again" : "waits: not due yet";
  const time = formatTime(until);
  if (hasFailed) return `retries at ${time}`;
  return isDelivery ? `delivers at ${time}` : `starts at ${time}`;
}

/**
 * A time as the panel writes it: hours and minutes, with the date when it is
 * not today (a backoff's end, a start set for later).
 *
 * @param {number} ms epoch ms
 * @param {number} [now] epoch ms
 */
export function panelTime(ms, now = Date.now()) {
  const at = new Date(ms);
  const time = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return at.toDateString() === new Date(now).toDateString() ? time : `${at.toLocaleDateString()} ${time}`;
}
