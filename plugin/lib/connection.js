/**
 * The socket's rules (SPEC §6): when the worker may connect, what a close
 * code means, when a silent socket counts as dead. The socket itself is
 * worker/socket.js.
 */

import { socketUrl } from "./frames.js";
import { serverUrlProblem } from "./server-url.js";

export const PING_MS = 20_000;
/** Nothing heard for this long (two pings unanswered, or a hello) means the socket is dead. */
export const SILENCE_MS = 2 * PING_MS + 5_000;
/** Close codes after which reconnecting cannot help until the options change (SPEC §6). */
const REFUSED_CODES = new Set([4401, 4403]);
const REPLACED_CODE = 4409;

/** Whether the settings name a server, a client and a token. */
export function hasSettings(settings) {
  return Boolean(settings && socketUrl(settings.serverUrl) && settings.clientId && settings.token);
}

/**
 * Why the worker does not connect now, as the status to show, or null when
 * it may. Settings saved before the plain-http rule, or edited around the
 * options page, are not used either; a hold-off (after a refusal or a
 * takeover) lasts until the person acts.
 *
 * @param {{settings: any, paused: any, holdOff: {state: string, detail: string} | undefined}} saved
 * @returns {{state: string, detail: string} | null}
 */
export function connectionBlock({ settings, paused, holdOff }) {
  if (!hasSettings(settings)) return { state: "unconfigured", detail: "open the options to pair with a server" };
  if (serverUrlProblem(settings.serverUrl, { isUnencryptedAccepted: settings.isUnencryptedAccepted === true })) {
    return { state: "unconfigured", detail: "plain http to another machine: open the options and tick \u201cI understand this is unencrypted\u201d, or use https" };
  }
  if (paused) return { state: "paused", detail: "paused from the popup" };
  if (holdOff) return { state: holdOff.state, detail: holdOff.detail };
  return null;
}

/**
 * The hold-off a close code calls for, or null when reconnecting may help.
 * After a refused token, reconnecting cannot help until the options change;
 * after a takeover by another browser of the same client id, reconnecting
 * would take it back and start a fight: both wait for the person (popup) or
 * new options.
 *
 * @returns {{state: string, detail: string} | null}
 */
export function holdOffAfterClose(code) {
  if (REFUSED_CODES.has(code)) return { state: "refused", detail: `token refused (close code ${code}); check the options` };
  if (code === REPLACED_CODE) return { state: "paused", detail: "another browser window of this client took over" };
  return null;
}

/**
 * The status while waiting `delayMs` to reconnect. A socket closed before
 * any hello.ok never reached the server (or the server answered no hello).
 *
 * @returns {{state: "connecting", detail: string, reason: string}}
 */
export function reconnectingStatus(code, { wasReached, delayMs }) {
  const retry = `reconnecting in ${Math.ceil(delayMs / 1000)} s`;
  if (wasReached) return { state: "connecting", detail: retry, reason: "" };
  return { state: "connecting", detail: `server unreachable (close code ${code}); ${retry}`, reason: "unreachable" };
}

/** Whether a socket last heard from at `lastHeardAt` has been silent too long at `now`. */
export function isSilent(lastHeardAt, now) {
  return now - lastHeardAt > SILENCE_MS;
}
