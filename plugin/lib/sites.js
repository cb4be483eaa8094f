/**
 * Which chat sites the generic page adapter serves, from which description,
 * and where its content script is registered (SPEC §9, "Platforms as data").
 *
 * - The descriptions in force: the plugin's own plugin/sites/<name>.json,
 *   each replaced by the one of that name the paired server handed over
 *   (`sites` frame, kept in chrome.storage.local under SITES_KEY) when that
 *   one is still valid; a site only the server knows is added. A
 *   description that does not validate is dropped, and the built-in one of
 *   its name, if any, stays.
 * - An origin belongs to one site (`sitesInForce`): no description may
 *   claim an origin of the three adapters with network capture, and a
 *   server's description claiming an origin another site in force claims is
 *   refused and reported (`dropped`), never settled by name order: the
 *   plugin's own description keeps its origins.
 * - The server's answer: `sitesGetFrame` asks only when `hello.ok`'s
 *   `sites_version` differs from the stored one; `storedSitesOf` keeps the
 *   valid descriptions of a `sites` frame.
 * - Switched on: a site is read only once the person switched it on in the
 *   options page (kept in chrome.storage.local under SWITCHED_ON_KEY with
 *   the origins it was switched on for), Chrome granted those origins
 *   (asked for by the same switch), and the plugin's modules may load there
 *   (`isLoadable`): `sitesOn`. A grant alone, given in Chrome's own menu or
 *   for something else, turns nothing on; a description whose origins grew
 *   since is off until switched on again. A site on gets one registered
 *   content script (`siteScript`); `registrationPlan` says what to register
 *   and unregister so that the registered scripts are exactly those of the
 *   sites on.
 *
 * Pure: no chrome.*, no I/O.
 */

import { RESERVED_ORIGINS, siteDescriptionProblems, validSiteDescription } from "./site-description.js";

/** chrome.storage.local key of the server's descriptions: `{version, descriptions: {name: description}}`. */
export const SITES_KEY = "sites";
/** chrome.storage.local key of the sites the person switched on: `{name: {origins: [origin…]}}` (worker/site-sync.js writes it). */
export const SWITCHED_ON_KEY = "sitesSwitchedOn";
/** What a server may hand over at most (the server keeps to the same). */
export const MAX_SITES = 64;
export const MAX_DESCRIPTION_BYTES = 16 * 1024;
export const MAX_VERSION_CHARS = 200;
/** The registered content scripts' ids start with this; no other script of the plugin's does. */
export const SCRIPT_ID_PREFIX = "site-";
/**
 * What a site's page runs: the isolated-world entry of a page read from the
 * DOM only (no MAIN-world hook). From the extension's root: Firefox resolves
 * a relative path against the page that registers it (Chrome takes either).
 */
export const SITE_SCRIPT_FILES = Object.freeze(["/content/site-relay.js"]);

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
 * ship; each origin claimed by one site at most.
 *
 * An origin two of them claim is not given to either by name: every stored
 * description claiming it is refused (the built-in one of its name, if
 * any, comes back), so the plugin's own description keeps its origins and
 * two of the server's that collide are both left out. Built-in
 * descriptions never collide (a test says so); should two, both are left
 * out. `reservedOrigins` are the origins of the adapters with network
 * capture, which no description may take.
 *
 * @param {Record<string, unknown>} builtIn the packaged descriptions, by name
 * @param {StoredSites | undefined} stored what the server handed over, as stored
 * @param {{reservedOrigins?: readonly string[]}} [options]
 * @returns {{sites: Map<string, Description>, dropped: Dropped[]}} in name order; `dropped`: what was left out and why
 */
export function sitesInForce(builtIn, stored, { reservedOrigins = RESERVED_ORIGINS } = {}) {
  const dropped = [];
  const reserved = new Set(reservedOrigins);
  const refuse = (name, from, problem) => void dropped.push({ name, problems: [`${from}: ${problem}`] });
  /** The valid description, or null with why it is not in `dropped`. */
  const checked = (name, value, from) => {
    const problems = from === "stored" ? handedOverProblems(value) : siteDescriptionProblems(value);
    if (!problems.length && value.name !== name) problems.push(`$.name: "${value.name}" kept under "${name}"`);
    const taken = problems.length ? undefined : value.origins.find((origin) => reserved.has(origin));
    if (taken) problems.push(`$.origins: ${taken} is an adapter's with network capture`);
    if (!problems.length) return validSiteDescription(value);
    dropped.push({ name, problems: [`${from}: ${problems[0]}`, ...problems.slice(1)] });
    return null;
  };

  /** @type {Map<string, Description>} */
  const own = new Map();
  for (const [name, value] of Object.entries(builtIn)) {
    const description = checked(name, value, "built-in");
    if (description) own.set(name, description);
  }
  for (const [origin, names] of contestedOrigins(own)) {
    for (const name of names) if (own.delete(name)) refuse(name, "built-in", `$.origins: ${origin} is claimed by ${others(names, name)} too: an origin belongs to one site`);
  }

  const inForce = new Map(own);
  const fromServer = new Set();
  const storedDescriptions = isObject(stored?.descriptions) ? stored.descriptions : {};
  for (const [name, value] of Object.entries(storedDescriptions).slice(0, MAX_SITES)) {
    const description = checked(name, value, "stored");
    if (!description) continue;
    inForce.set(name, description);
    fromServer.add(name);
  }
  // Each pass refuses at least one of the server's (the plugin's own never
  // collide), and a refused one's built-in may claim an origin again: until none collide.
  for (let contested = contestedOrigins(inForce); contested.size; contested = contestedOrigins(inForce)) {
    for (const [origin, names] of contested) {
      for (const name of names.filter((each) => fromServer.has(each))) {
        refuse(name, "stored", `$.origins: ${origin} is claimed by ${others(names, name)} too: an origin belongs to one site`);
        fromServer.delete(name);
        if (own.has(name)) inForce.set(name, own.get(name));
        else inForce.delete(name);
      }
    }
  }
  const sites = new Map([...inForce.keys()].sort().map((name) => [name, inForce.get(name)]));
  return { sites, dropped };
}

/** The origins more than one of `sites` claims, each with the names claiming it. */
function contestedOrigins(sites) {
  const claims = new Map();
  for (const [name, description] of sites) for (const origin of description.origins) claims.set(origin, [...(claims.get(origin) ?? []), name]);
  return new Map([...claims].filter(([, names]) => names.length > 1));
}

const others = (names, name) => names.filter((each) => each !== name).join(", ");

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

/** A script's file with one leading "/": what either browser reads back names the same file, with or without it. */
const rootPath = (file) => `/${String(file).replace(/^\/+/, "")}`;

const sameScript = (a, b) =>
  a.id === b.id &&
  JSON.stringify([...(a.matches ?? [])].sort()) === JSON.stringify([...b.matches].sort()) &&
  JSON.stringify((a.js ?? []).map(rootPath)) === JSON.stringify(b.js.map(rootPath)) &&
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

/** @typedef {Readonly<Record<string, {origins: readonly string[]}>>} SwitchedOn the person's switches: each site switched on, with the origins it was switched on for */

/**
 * The switches as stored (SWITCHED_ON_KEY), anything else in the value left out.
 *
 * @param {unknown} value
 * @returns {SwitchedOn}
 */
export function switchedOnOf(value) {
  if (!isObject(value)) return {};
  const switchedOn = {};
  for (const [name, entry] of Object.entries(value)) {
    const origins = isObject(entry) && Array.isArray(entry.origins) ? entry.origins.filter((origin) => typeof origin === "string") : [];
    if (origins.length) switchedOn[name] = { origins };
  }
  return switchedOn;
}

/** `switchedOn` with the site of `description` switched on, for its origins of now. */
export function switchOn(switchedOn, description) {
  return { ...switchedOn, [description.name]: { origins: [...description.origins].sort() } };
}

/** `switchedOn` with the site `name` switched off. */
export function switchOff(switchedOn, name) {
  const { [name]: _off, ...rest } = switchedOn;
  return rest;
}

/**
 * Did the person switch this site on, for every origin its description
 * claims now? A description handed over later with an origin more is not:
 * the person said yes to the origins they saw.
 *
 * @param {SwitchedOn} switchedOn
 * @param {Description} description
 */
export function isSwitchedOn(switchedOn, description) {
  const entry = Object.hasOwn(switchedOn, description.name) ? switchedOn[description.name] : null;
  return entry !== null && description.origins.every((origin) => entry.origins.includes(origin));
}

/**
 * The sites the plugin reads: switched on by the person (`isSwitchedOn`),
 * loadable, and with all their origins granted. A grant alone is not enough.
 *
 * @param {{sites: Map<string, Description>, switchedOn: SwitchedOn, granted: ReadonlySet<string>, accessiblePatterns: readonly string[]}} state
 *   `granted`: the sites whose origins Chrome grants
 * @returns {Set<string>}
 */
export function sitesOn({ sites, switchedOn, granted, accessiblePatterns }) {
  const on = new Set();
  for (const [name, description] of sites) {
    if (isSwitchedOn(switchedOn, description) && granted.has(name) && isLoadable(description, accessiblePatterns)) on.add(name);
  }
  return on;
}

/**
 * The switches once the grants withdrawn since are taken into account: a
 * site switched on whose origins Chrome no longer grants all of (the
 * person took them back in Chrome's menu) is switched off, so that a later
 * grant does not turn it on again by itself. A switch of a site not known
 * now, or whose description claims other origins than were switched on,
 * stays as it is (such a site is off: `isSwitchedOn`).
 *
 * @param {{sites: Map<string, Description>, switchedOn: SwitchedOn, granted: ReadonlySet<string>}} state
 * @returns {SwitchedOn} `switchedOn` itself when nothing changes
 */
export function withoutWithdrawn({ sites, switchedOn, granted }) {
  const withdrawn = Object.keys(switchedOn).filter((name) => sites.has(name) && isSwitchedOn(switchedOn, sites.get(name)) && !granted.has(name));
  return withdrawn.reduce(switchOff, switchedOn);
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
