/**
 * The frames the plugin sends (SPEC §6), built in one place so that their
 * field names are the spec's and nothing else rides along.
 */

/** What this plugin performs of the server's delivery frames. */
export const CAPABILITIES = Object.freeze(["proxy_delivery", "dom_delivery"]);

/** The server takes at most 16 platforms and adapters in a hello (and refuses the hello beyond). */
export const MAX_HELLO_ADAPTERS = 16;

/**
 * @param {{clientId: string, token: string, version: string,
 *   adapters: readonly {name: string, version: string}[]}} hello
 *   the adapters in force, those with network capture first; beyond
 *   MAX_HELLO_ADAPTERS the rest are not named (their frames still go)
 */
export function helloFrame({ clientId, token, version, adapters: all }) {
  const adapters = all.slice(0, MAX_HELLO_ADAPTERS);
  return {
    type: "hello",
    client_id: clientId,
    token,
    plugin_version: version,
    platforms: adapters.map((adapter) => adapter.name),
    capabilities: [...CAPABILITIES],
    adapters: Object.fromEntries(adapters.map((adapter) => [adapter.name, adapter.version])),
  };
}

/**
 * A `browser.final_message`; ids the page did not know are left out rather
 * than sent empty.
 *
 * @param {{id: string, platform: string, capture: import('../adapters/types.js').Capture,
 *   method: "network" | "dom", pageUrl?: string, title?: string, observedAt: string}} message
 */
export function finalMessageFrame({ id, platform, capture, method, pageUrl, title, observedAt }) {
  /** @type {Record<string, any>} */
  const frame = {
    type: "browser.final_message",
    id,
    platform,
    conversation_id: capture.conversation_id,
    text: capture.text,
    capture: method,
    observed_at: observedAt,
  };
  const optional = {
    message_id: capture.message_id,
    parent_message_id: capture.parent_message_id,
    organization_id: capture.organization_id,
    page_url: pageUrl,
    title,
  };
  for (const [field, value] of Object.entries(optional)) {
    if (typeof value === "string" && value) frame[field] = value;
  }
  return frame;
}

/** The server's bound on a frame (SPEC §6). */
export const MAX_FRAME_BYTES = 1024 * 1024;

/** Whether the server would refuse `frame` as `too_large`: kept, it would be resent forever. */
export function isOverFrameLimit(frame) {
  return new TextEncoder().encode(JSON.stringify(frame)).length > MAX_FRAME_BYTES;
}

/**
 * @typedef {{ok: boolean, status: number | null, body: string | null,
 *   error: string | null, error_code?: string | null}} ProxyResult
 */

/**
 * A `browser.proxy_delivery.result` for `requestId`. An `error_code` means
 * the request could not be made, so `ok` is false whatever the result says.
 *
 * @param {string} requestId
 * @param {ProxyResult} result
 */
export function proxyResultFrame(requestId, result) {
  const errorCode = result.error_code ?? null;
  return {
    type: "browser.proxy_delivery.result",
    request_id: requestId,
    ok: Boolean(result.ok) && errorCode === null,
    status: Number.isInteger(result.status) ? result.status : null,
    body: typeof result.body === "string" ? result.body : null,
    error: typeof result.error === "string" ? result.error : null,
    ...(errorCode === null ? {} : { error_code: errorCode }),
  };
}

/** The `error_code`s a delivery result may carry (SPEC §6). */
const DELIVERY_ERROR_CODES = new Set(["page_value_missing", "no_tab", "blocked", "selector_missing"]);

/**
 * A `browser.dom_delivery.result` for `requestId`. `ok` only with
 * `evidence.user_turn_seen` (SPEC §6: the plugin saw the new user turn), and
 * never with an `error_code`; `evidence` keeps its booleans and short strings
 * only.
 *
 * @param {string} requestId
 * @param {import('./composer.js').DomResult} result
 */
export function domResultFrame(requestId, result) {
  const errorCode = DELIVERY_ERROR_CODES.has(result.error_code) ? result.error_code : null;
  /** @type {Record<string, boolean | string>} */
  const evidence = {};
  for (const [name, value] of Object.entries(result.evidence ?? {})) {
    if (typeof value === "boolean" || (typeof value === "string" && value.length <= 64)) evidence[name] = value;
  }
  const ok = Boolean(result.ok) && errorCode === null && evidence.user_turn_seen === true;
  return {
    type: "browser.dom_delivery.result",
    request_id: requestId,
    ok,
    error: typeof result.error === "string" ? result.error : ok ? null : "the delivery failed",
    error_code: ok ? null : errorCode,
    evidence,
  };
}

/** Was this DOM delivery sent (its user turn seen), so a repeat must not send again? */
export function isSentToComposer(result) {
  return Boolean(result?.ok) && result.evidence?.user_turn_seen === true;
}

/** Was this result a request the app accepted (so a repeat must not post again)? */
export function isPosted(result) {
  return Boolean(result?.ok) && Number.isInteger(result.status) && result.status >= 200 && result.status < 300;
}

/**
 * The socket URL for a server URL as a person pastes it: `http(s)://host:port`
 * (any path is replaced) or already `ws(s)://…/ws/plugin/`.
 *
 * @param {string} serverUrl
 * @returns {string | null} null when it is not an http(s) or ws(s) URL
 */
export function socketUrl(serverUrl) {
  let url;
  try {
    url = new URL(String(serverUrl).trim());
  } catch {
    return null;
  }
  const schemes = { "http:": "ws:", "https:": "wss:", "ws:": "ws:", "wss:": "wss:" };
  if (!Object.hasOwn(schemes, url.protocol) || !url.host) return null;
  return `${schemes[url.protocol]}//${url.host}/ws/plugin/`;
}

/** Is `serverUrl` on this machine (no host permission needed to reach it)? */
export function isLoopback(serverUrl) {
  try {
    const host = new URL(serverUrl).hostname;
    return host === "localhost" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host);
  } catch {
    return false;
  }
}
