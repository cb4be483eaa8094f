/**
 * The chat sites read from the page (SPEC §9, "Platforms as data") in the
 * worker: the descriptions from the paired server, and the content scripts
 * of the sites switched on.
 *
 * - After each `hello.ok` naming a `sites_version` other than the stored
 *   one, `sites.get` asks for the server's descriptions (matched by `id`,
 *   worker/questions.js); the server also sends them unasked (`id: null`)
 *   when an operator changed one. The valid ones are stored (chrome.storage.local,
 *   lib/sites.js SITES_KEY) with the version. Only this module writes
 *   that key, and only with a frame from the socket to the paired server:
 *   no message from a page or a content script reaches it. Pages use them
 *   from their next load.
 * - A site is read only once the person switched it on in the options
 *   page: the page asks Chrome for the site's origins inside the click, then
 *   tells this worker (`switchSite`), which keeps the switch in
 *   chrome.storage.local (lib/sites.js SWITCHED_ON_KEY, with the origins
 *   switched on for; only this module writes it, for the extension's own
 *   pages; content scripts cannot read or write that area). A grant alone
 *   (Chrome's own site access menu, or one given for something else) turns
 *   nothing on. A site on (lib/sites.js `sitesOn`) gets its content script
 *   registered (chrome.scripting); `syncScripts` makes the registered
 *   scripts match the sites on: at every start of the worker, on every
 *   change of permissions, after new descriptions, at each switch. A grant
 *   taken back in Chrome's menu switches its site off.
 * - What a site's page may do is asked of `isSiteOn` each time: its
 *   description (`descriptionForPage`), its messages and reports taken
 *   (background.js), a delivery into it (worker/delivering.js).
 */

import { answerOf } from "../lib/answers.js";
import {
  isLoadable, matchPatterns, registrationPlan, SITES_KEY, siteRows, sitesGetFrame, sitesOn, storedSitesOf, switchedOnOf, SWITCHED_ON_KEY, switchOff,
  switchOn, withoutWithdrawn,
} from "../lib/sites.js";
import { ask } from "./questions.js";
import { loadSites } from "../lib/site-descriptions.js";
import { local } from "./storage.js";

/** Reads the descriptions in force; unreadable, the three adapters with network capture go on alone. */
function load() {
  return loadSites().catch((error) => {
    console.warn("Conductor: the site descriptions could not be read:", error);
    return { sites: new Map(), dropped: [] };
  });
}

/** The descriptions in force and those left out; every use of the adapters waits for it (background.js). */
export let sitesReady = load();

/**
 * Asks the server for its descriptions when its `hello.ok` names a version
 * other than the stored one, stores the valid ones and puts them in force.
 * A failure (no answer, an `error`) keeps the stored ones: the next
 * `hello.ok` asks again.
 */
export async function refreshSites(helloOk) {
  const stored = await local.get(SITES_KEY);
  const question = sitesGetFrame(helloOk, stored?.version, "");
  if (!question) return;
  await takeSites(answerOf(await ask((id) => ({ ...question, id })), "sites"));
}

/**
 * Stores the valid descriptions of a `sites` frame (the answer to
 * `sites.get`, or one the server sends unasked when an operator changed a
 * site) and puts them in force.
 */
export async function takeSites(frame) {
  const result = storedSitesOf(frame);
  if (!result) throw new Error("the server's sites frame has no sites_version or no list of sites");
  for (const { name, problems } of result.dropped) {
    console.warn("Conductor: the server's description of a site is not valid; the plugin's own stays:", name, problems.slice(0, 3).join("; "));
  }
  await local.set(SITES_KEY, result.stored);
  sitesReady = load();
  await sitesReady;
  await syncScripts();
}

/** Where the plugin's modules may load: the manifest's web_accessible_resources matches. */
const ACCESSIBLE_PATTERNS = chrome.runtime.getManifest().web_accessible_resources.flatMap((entry) => entry.matches ?? []);

/** The sites whose origins Chrome grants, all of them, among those where the plugin's modules may load. */
async function grantedSites(sites) {
  const granted = new Set();
  for (const [name, description] of sites) {
    if (!isLoadable(description, ACCESSIBLE_PATTERNS)) continue;
    if (await chrome.permissions.contains({ origins: matchPatterns(description) })) granted.add(name);
  }
  return granted;
}

/**
 * The sites the plugin reads now (lib/sites.js `sitesOn`); the switches of
 * sites whose grant was taken back are switched off on the way.
 */
async function sitesOnNow(sites) {
  const granted = await grantedSites(sites);
  const stored = switchedOnOf(await local.get(SWITCHED_ON_KEY));
  const switchedOn = withoutWithdrawn({ sites, switchedOn: stored, granted });
  if (switchedOn !== stored) await local.set(SWITCHED_ON_KEY, switchedOn);
  return sitesOn({ sites, switchedOn, granted, accessiblePatterns: ACCESSIBLE_PATTERNS });
}

/** Is the site `name` read now? Asked at each use: the worker may have slept since the last sync. */
export async function isSiteOn(name) {
  const { sites } = await sitesReady;
  if (!sites.has(name)) return false;
  const one = new Map([[name, sites.get(name)]]);
  const switchedOn = switchedOnOf(await local.get(SWITCHED_ON_KEY));
  return sitesOn({ sites: one, switchedOn, granted: await grantedSites(one), accessiblePatterns: ACCESSIBLE_PATTERNS }).has(name);
}

let syncing = Promise.resolve();

/** Runs `step` after every earlier sync or switch: each reads and writes the switches whole. */
function inTurn(step) {
  const next = syncing.then(step);
  syncing = next.catch((error) => console.warn("Conductor: the sites' content scripts were not brought up to date:", error));
  return next;
}

/** @returns {Promise<{rows: ReturnType<typeof siteRows>, notUsed: import('../lib/sites.js').Dropped[]}>} */
async function sync() {
  const { sites, dropped } = await sitesReady;
  const on = await sitesOnNow(sites);
  const registered = await chrome.scripting.getRegisteredContentScripts();
  const plan = registrationPlan({ sites, isOn: (name) => on.has(name), registered });
  if (plan.unregister.length) await chrome.scripting.unregisterContentScripts({ ids: plan.unregister });
  if (plan.register.length) await chrome.scripting.registerContentScripts(plan.register);
  return { rows: siteRows(sites, (name) => on.has(name), ACCESSIBLE_PATTERNS), notUsed: dropped };
}

/**
 * Registers the content scripts of the sites on and unregisters the others
 * (lib/sites.js `registrationPlan`), one sync after the other. Resolves
 * with what the options page shows: the rows, and the descriptions not used.
 */
export function syncScripts() {
  return inTurn(sync);
}

/**
 * The options page's switch: on (after Chrome granted the site's origins,
 * asked for by the page inside the click) or off; then the scripts are
 * synced. Switched on only for a site known, loadable and granted now.
 *
 * @param {string} name
 * @param {boolean} isOn
 */
export function switchSite(name, isOn) {
  return inTurn(async () => {
    const { sites } = await sitesReady;
    const description = sites.get(name);
    const switchedOn = switchedOnOf(await local.get(SWITCHED_ON_KEY));
    if (!isOn) await local.set(SWITCHED_ON_KEY, switchOff(switchedOn, name));
    else if (description && (await grantedSites(new Map([[name, description]]))).has(name)) {
      await local.set(SWITCHED_ON_KEY, switchOn(switchedOn, description));
    }
    return sync();
  });
}

/** The description of a page's site, for its content script: only a site on; null otherwise. */
export async function descriptionForPage(url) {
  let origin;
  try {
    origin = new URL(url).origin;
  } catch {
    return null;
  }
  for (const description of (await sitesReady).sites.values()) {
    if (description.origins.includes(origin)) return (await isSiteOn(description.name)) ? description : null;
  }
  return null;
}
