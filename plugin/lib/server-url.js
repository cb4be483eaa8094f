/**
 * Which server URLs the plugin connects to (docs/security.md, "What the
 * plugin may request"). The token goes out in `hello` and every chat
 * answer follows it, so plain `http://` is taken for a local server only
 * (localhost, 127.0.0.0/8, ::1), or when the person ticked "I understand
 * this is unencrypted". The options page, a pasted pairing code
 * (lib/pairing.js) and the service worker apply this one rule.
 *
 * Pure.
 */

import { isLoopback, socketUrl } from "./frames.js";

export const NOT_HTTP = "The server URL must start with http:// or https://.";
export const UNENCRYPTED =
  "This server is on another machine over plain http://: the token and every answer would cross the network unencrypted. " +
  "Serve Conductor over https:// (behind a reverse proxy), or tick \u201cI understand this is unencrypted\u201d.";

/** Is this an `http://` (or `ws://`) URL of a host other than this machine? */
export function isUnencrypted(serverUrl) {
  try {
    return ["http:", "ws:"].includes(new URL(String(serverUrl).trim()).protocol) && !isLoopback(String(serverUrl).trim());
  } catch {
    return false;
  }
}

/**
 * What is wrong with connecting to `serverUrl`, or "" when nothing is.
 *
 * @param {unknown} serverUrl
 * @param {{isUnencryptedAccepted?: boolean}} [consent] the box "I understand this is unencrypted"
 * @returns {string}
 */
export function serverUrlProblem(serverUrl, { isUnencryptedAccepted = false } = {}) {
  if (typeof serverUrl !== "string" || !socketUrl(serverUrl)) return NOT_HTTP;
  if (isUnencrypted(serverUrl) && isUnencryptedAccepted !== true) return UNENCRYPTED;
  return "";
}
