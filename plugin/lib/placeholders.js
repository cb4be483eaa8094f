/**
 * Filling the `{{page:NAME}}` placeholders of a `browser.proxy_delivery`
 * request with the page's values. The rules are those of
 * `automation/platforms/registry.py`'s `fill_page_values`:
 *
 * - URL, and a body sent as `application/x-www-form-urlencoded`: the value is
 *   percent-encoded;
 * - any other body (JSON): the value is escaped as JSON string content (the
 *   server only puts placeholders inside JSON strings);
 * - a header: the value as it is; a header whose whole value is one
 *   placeholder is dropped when the page has no value or an empty one (the
 *   optional headers, such as ChatGPT's sentinel tokens).
 *
 * Substitution is one pass over the server's text: a value that itself
 * contains `{{page:...}}` is never filled again. Text the server took from
 * elsewhere (the delivered message) reaches us with its `{` written as
 * `\u007b`, so it cannot form a placeholder.
 */

const PLACEHOLDER_SOURCE = String.raw`\{\{page:([A-Za-z0-9_.]+)\}\}`;
const FORM_CONTENT_TYPE = "application/x-www-form-urlencoded";

/** @typedef {{method: string, url: string, headers: Record<string, string>, body: string}} ProxyRequest */

export class MissingPageValue extends Error {
  /** @param {string} valueName */
  constructor(valueName) {
    super(`the page has no value for {{page:${valueName}}}`);
    this.name = "MissingPageValue";
    this.valueName = valueName;
    this.code = "page_value_missing";
  }
}

/** A fresh global regex each time: a shared one would carry `lastIndex` between calls. */
function placeholders() {
  return new RegExp(PLACEHOLDER_SOURCE, "g");
}

function isWholePlaceholder(text) {
  return new RegExp(`^${PLACEHOLDER_SOURCE}$`).test(text);
}

/**
 * The names of the page values `request` needs, sorted, each once.
 *
 * @param {ProxyRequest} request
 * @returns {string[]}
 */
export function placeholderNames(request) {
  const texts = [request.url, request.body, ...Object.values(request.headers ?? {})];
  const names = new Set();
  for (const text of texts) {
    if (typeof text !== "string") continue;
    for (const match of text.matchAll(placeholders())) names.add(match[1]);
  }
  return [...names].sort();
}

/**
 * `request` with its placeholders filled from `values`.
 *
 * @param {ProxyRequest} request
 * @param {Record<string, string>} values only own string properties count
 * @returns {ProxyRequest}
 * @throws {MissingPageValue} naming the first placeholder `values` lacks
 */
export function fillPageValues(request, values) {
  const valueOf = (name) => {
    const value = Object.hasOwn(values, name) ? values[name] : undefined;
    if (typeof value !== "string") throw new MissingPageValue(name);
    // A lone surrogate cannot be percent-encoded (encodeURIComponent throws).
    return value.toWellFormed();
  };
  const fill = (text, encode) => text.replace(placeholders(), (_, name) => encode(valueOf(name)));

  /** @type {Record<string, string>} */
  const headers = {};
  for (const [header, text] of Object.entries(request.headers ?? {})) {
    if (typeof text !== "string") continue;
    if (isWholePlaceholder(text)) {
      const name = text.slice("{{page:".length, -"}}".length);
      const value = Object.hasOwn(values, name) ? values[name] : undefined;
      if (typeof value === "string" && value !== "") headers[header] = value;
      continue;
    }
    headers[header] = fill(text, (value) => value);
  }
  const contentType = Object.entries(request.headers ?? {}).find(([header]) => header.toLowerCase() === "content-type")?.[1] ?? "";
  const isForm = contentType.toLowerCase().startsWith(FORM_CONTENT_TYPE);
  return {
    ...request,
    url: fill(request.url, percentEncoded),
    headers,
    body: typeof request.body === "string" ? fill(request.body, isForm ? percentEncoded : jsonEscaped) : request.body,
  };
}

/**
 * Python's `quote(value, safe="")`: `encodeURIComponent` plus the five
 * characters it leaves alone, so both sides produce the same bytes.
 */
function percentEncoded(value) {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

function jsonEscaped(value) {
  return JSON.stringify(value).slice(1, -1);
}
