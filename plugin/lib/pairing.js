/**
 * Pairing codes (SPEC §9): the server URL, client id and token the options
 * page needs, in one string the admin's "Pair a browser" page shows once:
 * `conductor-pair:v1:<base64url JSON>`, the JSON being
 * `{"server": "http(s)://host:port", "client_id": "...", "token": "..."}`.
 * `server` is what the options' "Server URL" takes; the socket URL comes
 * from it (frames.js `socketUrl`).
 *
 * Written by the server's `ingest/pairing.py`; both read the vectors in
 * tests/fixtures/pairing-codes.json and refuse with the same messages.
 */

import { socketUrl } from "./frames.js";
import { isUnencrypted, serverUrlProblem } from "./server-url.js";

export const PREFIX = "conductor-pair:";
export const VERSION = "v1";

const NOT_A_CODE = "This is not a Conductor pairing code: it starts with conductor-pair:.";
const DAMAGED = "This pairing code is damaged or cut short: copy it again from the admin page.";
const NOT_HTTP = "This pairing code's server is not an http:// or https:// URL.";
const BASE64URL = /^[A-Za-z0-9_-]+$/;
const FIELDS = ["server", "client_id", "token"];

/**
 * @typedef {{serverUrl: string, clientId: string, token: string}} Pairing
 * @typedef {{ok: true, pairing: Pairing, warnings: string[]} | {ok: false, error: string, isUnencrypted?: true}} PairingResult
 */

/**
 * Reads a pasted code; whitespace anywhere is ignored (a code copied from a
 * mail or a terminal may be wrapped). Never throws.
 *
 * A code for plain http to another machine is refused (`isUnencrypted`)
 * unless the person ticked "I understand this is unencrypted"
 * (lib/server-url.js, the options page's own rule); the server's reader
 * (ingest/pairing.py) reads the format only, so the shared vectors are
 * read here with the box ticked.
 *
 * @param {string} text
 * @param {{isUnencryptedAccepted?: boolean}} [consent]
 * @returns {PairingResult}
 */
export function parsePairingCode(text, { isUnencryptedAccepted = false } = {}) {
  const code = String(text ?? "").replace(/\s+/g, "");
  if (!code.startsWith(PREFIX)) return { ok: false, error: NOT_A_CODE };
  const rest = code.slice(PREFIX.length);
  const colon = rest.indexOf(":");
  const version = colon === -1 ? rest : rest.slice(0, colon);
  const encoded = colon === -1 ? "" : rest.slice(colon + 1);
  if (version !== VERSION) {
    return {
      ok: false,
      error: `This pairing code is version ${version || "(none)"}, which this reader does not know (it reads ${VERSION}): update the plugin, or pair again.`,
    };
  }
  if (!BASE64URL.test(encoded)) return { ok: false, error: DAMAGED };
  let payload;
  try {
    const binary = atob(encoded.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (encoded.length % 4)) % 4));
    const bytes = Uint8Array.from(binary, (char) => char.charCodeAt(0));
    payload = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    return { ok: false, error: DAMAGED };
  }
  if (!payload || typeof payload !== "object" || Array.isArray(payload)) return { ok: false, error: DAMAGED };
  if (!FIELDS.every((field) => typeof payload[field] === "string" && payload[field])) return { ok: false, error: DAMAGED };
  const server = payload.server;
  if (!/^https?:$/.test(safeProtocol(server)) || !socketUrl(server)) return { ok: false, error: NOT_HTTP };
  const problem = serverUrlProblem(server, { isUnencryptedAccepted });
  if (problem) return { ok: false, error: problem, isUnencrypted: true };
  return {
    ok: true,
    pairing: { serverUrl: server, clientId: payload.client_id, token: payload.token },
    warnings: pairingWarnings(server),
  };
}

/** What a person should know before using this server URL (nothing stops them). */
export function pairingWarnings(serverUrl) {
  if (isUnencrypted(serverUrl)) {
    return [
      "This server is on another machine over plain http: the token crosses the network unencrypted. " +
        "Serve Conductor over https (behind a reverse proxy) for anything but a trusted local network.",
    ];
  }
  return [];
}

function safeProtocol(url) {
  try {
    return new URL(url).protocol;
  } catch {
    return "";
  }
}

/**
 * The connection of a paired browser in words, for the options page: the
 * service worker's status (popup/status.js) with the saved settings.
 *
 * A status set before the settings were saved (`at` < `savedAt`) is the
 * previous settings' connection: until the worker says more, "Connecting".
 *
 * @param {{state?: string, detail?: string, reason?: string, at?: number}} status
 * @param {{serverUrl?: string, clientId?: string, savedAt?: number} | undefined} settings
 * @returns {{text: string, isConnected: boolean}}
 */
export function connectionOutcome(status, settings) {
  const server = settings?.serverUrl ?? "";
  const client = settings?.clientId ?? "";
  if (!server || !client) return { text: "", isConnected: false };
  const connected = `Connected to ${server} as ${client}`;
  const isStale = Number.isFinite(status?.at) && Number.isFinite(settings?.savedAt) && status.at < settings.savedAt;
  switch (isStale ? "" : status?.state) {
    case "connected":
      if (status.reason === "outdated") {
        return {
          text: `${connected}, but this plugin is outdated: the server supports newer versions only. Update the plugin.`,
          isConnected: true,
        };
      }
      return { text: `${connected}.`, isConnected: true };
    case "refused":
      return {
        text: `Token refused: ${server} does not accept ${client}'s token (revoked, rotated or from another server). Pair again from the admin.`,
        isConnected: false,
      };
    case "paused":
      return { text: `Paused: ${status.detail || "from the popup"}.`, isConnected: false };
    case "connecting":
      if (status.reason === "unreachable") {
        return {
          text: `Server unreachable: ${server} does not answer (is Conductor running there, at that address?). Retrying.`,
          isConnected: false,
        };
      }
      return { text: `Connecting to ${server} as ${client}…`, isConnected: false };
    default:
      return { text: `Connecting to ${server} as ${client}…`, isConnected: false };
  }
}
