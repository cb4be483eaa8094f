/**
 * The connection's state in chrome.storage.session (`status`, `acks`) and
 * on the badge, with the count of blocks waiting for approval
 * (`approvalsWaiting`, worker/panel-relay.js), where the popup, the options page
 * and the side panel read them (lib/status.js decides what each becomes).
 */

import { badgeOf, nextStatus, withAck, withAttempt } from "../lib/status.js";
import { session } from "./storage.js";

/** Sets the state (see lib/status.js's `nextStatus` for `reason`) and shows it on the badge. */
export async function setStatus(state, detail = "", reason = "") {
  const status = nextStatus((await session.get("status")) ?? {}, { state, detail, reason }, Date.now());
  await session.set("status", status);
  await showBadge();
}

/** Shows the state and the count of blocks waiting for approval (`approvalsWaiting`) on the badge. */
export async function showBadge() {
  const { status = {}, pluginOutdated, approvalsWaiting = 0 } = await chrome.storage.session.get(["status", "pluginOutdated", "approvalsWaiting"]);
  if (!status.state) return;
  const badge = badgeOf(status.state, status.detail ?? "", pluginOutdated === true, approvalsWaiting);
  await chrome.action.setBadgeText({ text: badge.text });
  await chrome.action.setBadgeBackgroundColor({ color: badge.color });
  await chrome.action.setTitle({ title: badge.title });
}

export async function countAttempt() {
  await session.set("status", withAttempt((await session.get("status")) ?? {}, Date.now()));
}

/** Keeps how long the server took to acknowledge frame `id`, for the popup. */
export async function recordAckLatency(id, ms) {
  await session.set("acks", withAck(await session.get("acks"), { id, ms, at: Date.now() }));
}

/** The state and its detail in one line ("connecting, reconnecting in 4 s"), or "". */
export async function statusLine() {
  const status = (await session.get("status")) ?? {};
  return [status.state, status.detail].filter(Boolean).join(", ");
}
