/**
 * The connection's state as the badge, the popup and the options page show
 * it (`status` in chrome.storage.session), and the recent acks' latency the
 * popup shows (`acks`). The service worker (worker/status.js) reads and
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
 * The badge and the action's title for a state. A connected plugin the
 * server supports only for now still works, but says so.
 *
 * @returns {{text: string, color: string, title: string}}
 */
export function badgeOf(state, detail, isOutdated) {
  const isOutdatedShown = state === "connected" && isOutdated;
  const { text, color } = BADGES[isOutdatedShown ? "outdated" : state];
  const note = isOutdatedShown ? " (update the extension)" : "";
  return { text, color, title: `Conductor: ${state}${detail ? ` (${detail})` : ""}${note}` };
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
