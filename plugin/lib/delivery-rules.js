/**
 * What a delivery may do (docs/security.md, "What the plugin may request").
 *
 * A `browser.proxy_delivery` is made with the person's cookies, so a frame
 * the server did not mean (a forged channel-layer message, a bug) must not
 * be able to make any other request on the chat site. Each adapter declares
 * the requests it may make (`deliveryRequests`, a list of `DeliveryRule`s):
 * the method, the path, the query keys, the headers, and where the request
 * names its conversation, which must be the frame's. Anything else is
 * refused before a tab is touched, and again in the page once the page
 * values are filled in (a value from the page cannot move the request
 * elsewhere). A `browser.dom_delivery`, and a proxy delivery's page, go only
 * into a tab that shows the frame's conversation.
 *
 * A refusal answers `error_code: "blocked"` (SPEC §6: the request cannot be
 * made here; the server moves on to its next method, §6.1) and is counted
 * as a `delivery_blocked` adapter report whose `reason` says which check.
 *
 * Pure: no browser API.
 */

/** Longer URLs are refused unread: no delivery request needs more. */
export const MAX_URL_CHARS = 8192;
/** More headers than this are refused unread. */
export const MAX_HEADERS = 64;

/**
 * @typedef {{
 *   method: string,
 *   path: RegExp,
 *   query: string[],
 *   headers: string[],
 *   conversationOf(request: {path: RegExpMatchArray, url: URL, body: string}): string | null,
 * }} DeliveryRule
 *   `path` is matched against the URL's pathname (as `new URL` normalises
 *   it, which is the URL `fetch` requests); `query` the keys the query may
 *   have, each at most once; `headers` the header names allowed, lower
 *   case; `conversationOf` the conversation the request posts to (from the
 *   path's groups or the body), or null when it names none.
 *
 * @typedef {{reason: string, error: string}} Refusal
 *   `reason` a short name for the adapter report (`refused_method`, ...),
 *   `error` one line for the delivery's result.
 */

/**
 * Why this request must not be made for the frame's conversation, or null
 * when the adapter's rules allow it.
 *
 * @param {{name: string, origins: string[], deliveryRequests: DeliveryRule[]}} adapter
 * @param {any} request the frame's `request` (before or after the page values are filled in)
 * @param {any} conversationId the frame's `conversation_id`
 * @returns {Refusal | null}
 */
export function deliveryRequestRefusal(adapter, request, conversationId) {
  if (!request || typeof request !== "object" || Array.isArray(request)) return refusal("request", "the delivery has no request");
  const { method, url: rawUrl, headers = {}, body = "" } = request;
  if (typeof rawUrl !== "string" || rawUrl.length > MAX_URL_CHARS) return refusal("request", "the request has no usable URL");
  if (typeof body !== "string" && body !== null) return refusal("request", "the request's body is not text");
  let url;
  try {
    url = new URL(rawUrl);
  } catch {
    return refusal("request", "the request's URL does not parse");
  }
  if (!adapter.origins.includes(url.origin) || url.username || url.password) {
    return refusal("origin", `${adapter.name} deliveries go to ${adapter.origins.join(", ")} only, not ${url.origin}`);
  }
  const rules = adapter.deliveryRequests.filter((rule) => rule.method === method);
  if (rules.length === 0) return refusal("method", `${adapter.name} deliveries are never ${String(method).slice(0, 20)} requests`);
  let rule;
  let path = null;
  for (const candidate of rules) {
    path = url.pathname.match(candidate.path);
    if (path) {
      rule = candidate;
      break;
    }
  }
  if (!rule || !path) return refusal("path", `${adapter.name} deliveries are never made to ${url.pathname.slice(0, 200)}`);
  // Firefox: in a content script the URL comes through its cross-world
  // wrapper, whose keys() iterator cannot be spread; forEach works everywhere.
  const keys = [];
  url.searchParams.forEach((_value, key) => keys.push(key));
  const badKey = keys.find((key, index) => !rule.query.includes(key) || keys.indexOf(key) !== index);
  if (badKey !== undefined) return refusal("query", `the request's query may not carry ${JSON.stringify(badKey.slice(0, 40))}`);
  if (!headers || typeof headers !== "object" || Array.isArray(headers)) return refusal("request", "the request's headers are not an object");
  const names = Object.keys(headers);
  if (names.length > MAX_HEADERS) return refusal("header", "the request has too many headers");
  const badHeader = names.find((name) => !rule.headers.includes(name.toLowerCase()) || typeof headers[name] !== "string");
  if (badHeader !== undefined) return refusal("header", `${adapter.name} deliveries never send the header ${JSON.stringify(badHeader.slice(0, 60))}`);
  const named = rule.conversationOf({ path, url, body: body ?? "" });
  if (typeof conversationId !== "string" || !conversationId || named !== conversationId) {
    return refusal("conversation", "the request does not post to the delivery's conversation");
  }
  return null;
}

/**
 * Why a tab showing `pageUrl` must not take a delivery for `conversationId`
 * (it shows another conversation, or none), or null.
 *
 * @param {{conversationIdFromUrl(url: string): string | null}} adapter
 * @param {any} conversationId
 * @param {string} pageUrl
 * @returns {Refusal | null}
 */
export function tabRefusal(adapter, conversationId, pageUrl) {
  if (typeof conversationId !== "string" || !conversationId) return refusal("conversation", "the delivery names no conversation");
  if (adapter.conversationIdFromUrl(pageUrl) !== conversationId) {
    return refusal("tab", "the page does not show the delivery's conversation");
  }
  return null;
}

/**
 * Why a delivery must not be made at all, before any tab is looked for:
 * the page that would be opened for it must show its conversation, and a
 * proxy delivery's request must be one the adapter may make.
 *
 * @param {{conversationIdFromUrl(url: string): string | null, conversationUrl(target: {conversation_id: string, page_url?: string}): string}} adapter
 * @param {any} frame a `browser.proxy_delivery` or `browser.dom_delivery`
 * @returns {Refusal | null}
 */
export function frameRefusal(adapter, frame) {
  const conversationId = frame?.conversation_id;
  const pageUrl = typeof frame?.page_url === "string" ? frame.page_url : "";
  const opened = typeof conversationId === "string" && conversationId ? adapter.conversationUrl({ conversation_id: conversationId, page_url: pageUrl }) : "";
  return tabRefusal(adapter, conversationId, opened) ?? (frame?.type === "browser.proxy_delivery" ? deliveryRequestRefusal(/** @type {any} */ (adapter), frame.request, conversationId) : null);
}

/** @returns {Refusal} */
function refusal(check, why) {
  return { reason: `refused_${check}`, error: `the plugin refused this delivery: ${why}` };
}

/**
 * A string field of a JSON object body, or null (the body is not JSON, not
 * an object, or the field is not a string).
 *
 * @param {string} body
 * @param {string} field
 */
export function jsonBodyField(body, field) {
  try {
    const value = JSON.parse(body)?.[field];
    return typeof value === "string" ? value : null;
  } catch {
    return null;
  }
}

/** A path group percent-decoded, or null when it does not decode. */
export function decodedSegment(segment) {
  try {
    return typeof segment === "string" ? decodeURIComponent(segment) : null;
  } catch {
    return null;
  }
}
