/**
 * The connection's state as the badge, the popup and the options page show
 * it (`status` in chrome.storage.session), the count of blocks waiting for
 * approval on the badge, and the recent acks' latency the popup shows
 * (`acks`). The service worker (worker/connection-status.js) reads and
 * writes them; what they become is decided here.
 */

/** The badge of each state; "outdated" is a connected plugin the server finds old (hello.ok `plugin_outdated`). */
export const BADGES = Object.freeze({
  connected: { text: "on", color: "#1a7f37" },
  connecting: { text: "…", color: "#6e7781" },
  refused: { text: "key", color: "#cf222e" },
  paused: { text: "off", color: "#bf8700" },
  unconfigured: { text: "set", color: "#6e7781" },
  outdated: { text: "upd", color: "#bf8700" },
});

/** Acks whose latency is kept for the popup. */
export const RECENT_ACKS = 50;

/**
 * The status after `state` is set at `now`. `reason` says why, for the
 * options page's pairing line: "unreachable" (no socket to the server),
 * "outdated" (hello.ok's `plugin_outdated`), "" otherwise; `since` is kept
 * while the state stays the same; `at` is when it was last set (a status
 * older than the settings is not theirs yet). Other fields (the attempts)
 * are kept.
 *
 * @param {Record<string, any>} previous
 * @param {{state: string, detail?: string, reason?: string}} change
 * @param {number} now
 */
export function nextStatus(previous, { state, detail = "", reason = "" }, now) {
  return { ...previous, state, detail, reason, since: previous.state === state ? previous.since : now, at: now };
}

/**
 * The states whose badge gives way to the count of blocks waiting for
 * approval: the count is the server's (hello.ok, status, instruction.status)
 * and is only as fresh as the connection. The badge keeps the state's
 * colour, so the connection stays visible; a refused token, a pause or
 * missing settings keep their text, since the person must act on those
 * first and the count cannot change meanwhile.
 */
const COUNT_SHOWN_IN = new Set(["connected", "connecting"]);

/** The badge's text for a count: at most three characters. */
export function countText(count) {
  return count > 99 ? "99+" : String(count);
}

/**
 * The badge and the action's title for a state, and the blocks of the
 * person's conversations waiting for approval (`approvalsWaiting`, owner-wide).
 * A connected plugin the server supports only for now still works, but says so.
 *
 * @returns {{text: string, color: string, title: string}}
 */
export function badgeOf(state, detail, isOutdated, approvalsWaiting = 0) {
  const isOutdatedShown = state === "connected" && isOutdated;
  const { text, color } = BADGES[isOutdatedShown ? "outdated" : state];
  const note = isOutdatedShown ? " (update the extension)" : "";
  const isCountShown = approvalsWaiting > 0 && COUNT_SHOWN_IN.has(state);
  const waiting = isCountShown ? `; ${approvalsWaiting} ${approvalsWaiting === 1 ? "block waits" : "blocks wait"} for approval` : "";
  return {
    text: isCountShown ? countText(approvalsWaiting) : text,
    color,
    title: `Conductor: ${state}${detail ? ` (${detail})` : ""}${note}${waiting}`,
  };
}

/** The status with one more connection attempt counted at `now`. */
export function withAttempt(status, now) {
  return { ...status, attempts: (status.attempts ?? 0) + 1, lastAttemptAt: now };
}

/**
 * The recent acks with `ack` added last, the oldest dropped past `limit`.
 *
 * @param {{id: string, ms: number, at: number}[] | undefined} acks
 * @param {{id: string, ms: number, at: number}} ack
 */
export function withAck(acks, ack, limit = RECENT_ACKS) {
  const kept = (acks ?? []).slice(-(limit - 1));
  kept.push(ack);
  return kept;
}
