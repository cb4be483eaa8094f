/**
 * Page helpers shared by the platform adapters: conversation URLs, DOM
 * look-ups over a selector table with fallbacks, and page-value readers.
 * The patterns and selectors they are given stay in each adapter.
 */

/** @returns {URL | null} */
export function parseUrl(url) {
  try {
    return new URL(url);
  } catch {
    return null;
  }
}

/**
 * `pattern` matched against the path of `url`, when `url` is a page of
 * `origin`; else null.
 *
 * @returns {RegExpMatchArray | null}
 */
export function pathMatch(url, origin, pattern) {
  const parsed = parseUrl(url);
  if (!parsed || parsed.origin !== origin) return null;
  return parsed.pathname.match(pattern);
}

/**
 * An adapter's `conversationUrl`: the page the delivery names when that page
 * shows the conversation (so a custom GPT's or a second account's page is
 * kept), else `ownPage(conversation_id)`.
 *
 * @param {(url: string) => string | null} conversationIdFromUrl
 * @param {(conversationId: string) => string} ownPage
 * @returns {(target: {conversation_id: string, page_url?: string}) => string}
 */
export function conversationUrlFor(conversationIdFromUrl, ownPage) {
  return ({ conversation_id, page_url }) =>
    page_url && conversationIdFromUrl(page_url) === conversation_id ? page_url : ownPage(conversation_id);
}

/**
 * All elements matching the first selector of `selectors` that matches any;
 * the later selectors are fallbacks for older or newer page versions.
 *
 * @param {ParentNode} root
 * @param {string[]} selectors
 * @returns {Element[]}
 */
export function queryAllFirst(root, selectors) {
  for (const selector of selectors) {
    const found = root.querySelectorAll(selector);
    if (found.length) return [...found];
  }
  return [];
}

/** The last element matching the first matching selector of `selectors`, or null. */
export function queryLast(root, selectors) {
  const found = queryAllFirst(root, selectors);
  return found.length ? found[found.length - 1] : null;
}

/** Whether any selector of `selectors` matches in `root`. */
export function anyMatches(root, selectors) {
  return queryAllFirst(root, selectors).length > 0;
}

/** The IANA time zone of this browser (the page's too: same process, same settings). */
export function timeZone() {
  try {
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    return typeof zone === "string" ? zone : "";
  } catch {
    return "";
  }
}

/**
 * Calls `read` and turns a throw, a rejection or a non-string into "": a page
 * value the page cannot give is left out, never an error.
 *
 * @param {() => any} read
 * @returns {Promise<string>}
 */
export async function quietly(read) {
  try {
    const value = await read();
    return typeof value === "string" ? value : "";
  } catch {
    return "";
  }
}

/**
 * Fills the names asked for from `readers` (name -> async reader), leaving
 * out names without a reader and values that came back empty.
 *
 * @param {string[]} names
 * @param {Record<string, () => Promise<string>>} readers
 * @returns {Promise<Record<string, string>>}
 */
export async function readValues(names, readers) {
  /** @type {Record<string, string>} */
  const values = {};
  for (const name of new Set(names)) {
    if (!Object.hasOwn(readers, name)) continue;
    const value = await quietly(readers[name]);
    if (value) values[name] = value;
  }
  return values;
}

/**
 * Memoises an async reader for one readPageValues call, so that values
 * sharing a look-up (Claude's org for the parent) fetch it once.
 *
 * @template T
 * @param {() => Promise<T>} read
 * @returns {() => Promise<T>}
 */
export function once(read) {
  /** @type {Promise<T> | undefined} */
  let result;
  return () => (result ??= read());
}
