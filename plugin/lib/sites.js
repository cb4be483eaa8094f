/**
 * Which chat sites the generic page adapter serves, from which description,
 * and where its content script is registered (SPEC §9, "Platforms as data").
 *
 * - The descriptions in force: the plugin's own plugin/sites/<name>.json,
 *   each replaced by the one of that name the paired server handed over
 *   (`sites` frame, kept in chrome.storage.local under SITES_KEY) when that
 *   one is still valid; a site only the server knows is added. A
 *   description that does not validate, or that claims an origin another
 *   site (or one of the three adapters with network capture) has, is
 *   dropped, and the built-in one of its name, if any, stays.
 * - The server's answer: `sitesGetFrame` asks only when `hello.ok`'s
 *   `sites_version` differs from the stored one; `storedSitesOf` keeps the
 *   valid descriptions of a `sites` frame.
 * - Switched on: a site whose origins Chrome granted (optional host
 *   permissions), and where the plugin's modules may load (`isLoadable`),
 *   gets one registered content script (`siteScript`);
 *   `registrationPlan` says what to register and unregister so that the
 *   registered scripts are exactly those of the sites switched on.
 *
 * Pure: no chrome.*, no I/O.
 */

import { siteDescriptionProblems, validSiteDescription } from "./site-description.js";

/** chrome.storage.local key of the server's descriptions: `{version, descriptions: {name: description}}`. */
export const SITES_KEY = "sites";
/** What a server may hand over at most (the server keeps to the same). */
export const MAX_SITES = 64;
export const MAX_DESCRIPTION_BYTES = 16 * 1024;
export const MAX_VERSION_CHARS = 200;
/** The registered content scripts' ids start with this; no other script of the plugin's does. */
export const SCRIPT_ID_PREFIX = "site-";
/** What a site's page runs: the isolated-world entry of a page read from the DOM only (no MAIN-world hook). */
export const SITE_SCRIPT_FILES = Object.freeze(["content/site-relay.js"]);

/** @typedef {Readonly<Record<string, any>>} Description */
/** @typedef {{version: string, descriptions: Record<string, unknown>}} StoredSites */
/** @typedef {{name: string, problems: string[]}} Dropped */

const isObject = (value) => typeof value === "object" && value !== null && !Array.isArray(value);

/** The problems of `value` as a description handed over by a server: the schema's, and its size. */
export function handedOverProblems(value) {
  const problems = siteDescriptionProblems(value);
  if (problems.length) return problems;
  const bytes = new TextEncoder().encode(JSON.stringify(value)).length;
  return bytes > MAX_DESCRIPTION_BYTES ? [`$: ${bytes} bytes, over ${MAX_DESCRIPTION_BYTES}`] : [];
}

/**
 * The descriptions in force, by name: the built-in ones, each replaced by a
 * valid stored one of its name, and the stored sites the plugin does not
 * ship. `reservedOrigins` are the origins of the adapters with network
 * capture, which no description may take.
 *
 * @param {Record<string, unknown>} builtIn the packaged descriptions, by name
 * @param {StoredSites | undefined} stored what the server handed over, as stored
 * @param {{reservedOrigins?: readonly string[]}} [options]
 * @returns {{sites: Map<string, Description>, dropped: Dropped[]}} in name order; `dropped`: what was left out and why
 */
export function sitesInForce(builtIn, stored, { reservedOrigins = [] } = {}) {
  /** @type {Map<string, Description>} */
  const chosen = new Map();
  const dropped = [];
  const take = (name, value, from) => {
    const problems = from === "stored" ? handedOverProblems(value) : siteDescriptionProblems(value);
    if (!problems.length && value.name !== name) problems.push(`$.name: "${value.name}" kept under "${name}"`);
    if (problems.length) return void dropped.push({ name, problems: [`${from}: ${problems[0]}`, ...problems.slice(1)] });
    chosen.set(name, validSiteDescription(value));
  };
  for (const [name, value] of Object.entries(builtIn)) take(name, value, "built-in");
  const storedDescriptions = isObject(stored?.descriptions) ? stored.descriptions : {};
  for (const [name, value] of Object.entries(storedDescriptions).slice(0, MAX_SITES)) take(name, value, "stored");

  // One site per origin: the built-in adapters' first, then by name.
  const owner = new Map(reservedOrigins.map((origin) => [origin, "(an adapter with network capture)"]));
  const sites = new Map();
  for (const name of [...chosen.keys()].sort()) {
    const description = chosen.get(name);
    const taken = description.origins.find((origin) => owner.has(origin));
    if (taken) {
      dropped.push({ name, problems: [`$.origins: ${taken} is ${owner.get(taken)}'s`] });
      continue;
    }
    for (const origin of description.origins) owner.set(origin, name);
    sites.set(name, description);
  }
  return { sites, dropped };
}

/**
 * The question to send after a `hello.ok`, or null: only when the server
 * names a `sites_version` (an older server does not) that is not the stored one.
 *
 * @param {any} helloOk
 * @param {string | undefined} storedVersion
 * @param {string} id the question's id
 */
export function sitesGetFrame(helloOk, storedVersion, id) {
  const version = helloOk?.sites_version;
  if (typeof version !== "string" || version === "" || version.length > MAX_VERSION_CHARS) return null;
  if (version === storedVersion) return null;
  return { type: "sites.get", id };
}

/**
 * What to store of a `sites` frame (the answer to `sites.get`): its
 * version and its valid descriptions by name; the others are `dropped`
 * (the built-in one of that name stays in force). Null for a frame that is
 * not a `sites` answer at all (nothing is stored then).
 *
 * @param {any} frame
 * @returns {{stored: StoredSites, dropped: Dropped[]} | null}
 */
export function storedSitesOf(frame) {
  if (frame?.type !== "sites" || !Array.isArray(frame.sites)) return null;
  const version = frame.sites_version;
  if (typeof version !== "string" || version === "" || version.length > MAX_VERSION_CHARS) return null;
  const descriptions = {};
  const dropped = [];
  frame.sites.forEach((value, index) => {
    const name = isObject(value) && typeof value.name === "string" ? value.name.slice(0, 40) : `#${index}`;
    if (index >= MAX_SITES) return void dropped.push({ name, problems: [`over ${MAX_SITES} sites`] });
    const problems = handedOverProblems(value);
    if (!problems.length && Object.hasOwn(descriptions, name)) problems.push("$.name: named twice");
    if (problems.length) return void dropped.push({ name, problems });
    descriptions[name] = value;
  });
  return { stored: { version, descriptions }, dropped };
}

/** The match patterns of a site's pages: `<origin>/*` each. */
export function matchPatterns(description) {
  return description.origins.map((origin) => `${origin}/*`);
}

/**
 * Can the plugin's modules load on the site's pages? Only on the origins
 * the manifest's `web_accessible_resources` names (a content script
 * imports them from there): kept to the known sites' origins, so that no
 * other website can tell the plugin is installed. A site the server added
 * on another origin is listed but waits for a plugin release naming it.
 *
 * @param {Record<string, any>} description
 * @param {readonly string[]} accessiblePatterns the manifest's `web_accessible_resources` matches
 */
export function isLoadable(description, accessiblePatterns) {
  return matchPatterns(description).every((pattern) => accessiblePatterns.includes(pattern));
}

/**
 * The content script a switched-on site gets (chrome.scripting's
 * RegisteredContentScript): the isolated-world entry only, at
 * document_start, top frames only, kept across browser restarts.
 */
export function siteScript(description) {
  return {
    id: `${SCRIPT_ID_PREFIX}${description.name}`,
    matches: matchPatterns(description),
    js: [...SITE_SCRIPT_FILES],
    runAt: "document_start",
    allFrames: false,
    world: "ISOLATED",
    persistAcrossSessions: true,
  };
}

const sameScript = (a, b) =>
  a.id === b.id &&
  JSON.stringify([...(a.matches ?? [])].sort()) === JSON.stringify([...b.matches].sort()) &&
  JSON.stringify(a.js ?? []) === JSON.stringify(b.js) &&
  (a.runAt ?? "document_idle") === b.runAt &&
  Boolean(a.allFrames) === b.allFrames &&
  (a.world ?? "ISOLATED") === b.world;

/**
 * What to change so that the registered site scripts are exactly those of
 * the sites switched on: a script of a site switched off or no longer
 * known goes, one whose site's origins or files changed is registered again.
 * Scripts not of SCRIPT_ID_PREFIX are not the sites' and are left alone.
 *
 * @param {{sites: Map<string, Description>, isOn: (name: string) => boolean, registered: readonly {id: string}[]}} state
 * @returns {{unregister: string[], register: ReturnType<typeof siteScript>[]}}
 */
export function registrationPlan({ sites, isOn, registered }) {
  const wanted = new Map();
  for (const [name, description] of sites) if (isOn(name)) wanted.set(`${SCRIPT_ID_PREFIX}${name}`, siteScript(description));
  const current = new Map(registered.filter((script) => script.id.startsWith(SCRIPT_ID_PREFIX)).map((script) => [script.id, script]));
  const unregister = [...current.keys()].filter((id) => !wanted.has(id) || !sameScript(current.get(id), wanted.get(id)));
  const register = [...wanted.values()].filter((script) => !current.has(script.id) || unregister.includes(script.id));
  return { unregister: unregister.sort(), register };
}

/**
 * The options page's rows: each known site with its title, origins,
 * whether it is on and whether it can be (`isLoadable`), in title order.
 *
 * @param {Map<string, Description>} sites
 * @param {(name: string) => boolean} isOn
 * @param {readonly string[]} accessiblePatterns
 */
export function siteRows(sites, isOn, accessiblePatterns) {
  return [...sites.values()]
    .map((description) => ({
      name: description.name,
      title: description.title,
      origins: [...description.origins],
      isOn: isOn(description.name),
      isLoadable: isLoadable(description, accessiblePatterns),
    }))
    .sort((a, b) => a.title.localeCompare(b.title, "en"));
}
