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
 * - A site is switched on when Chrome granted its origins (the options
 *   page asks, inside the click); its content script is then registered
 *   (chrome.scripting), and unregistered when the grant goes. `syncScripts`
 *   makes the registered scripts match the grants: at every start of the
 *   worker, on every change of permissions, after new descriptions.
 */

import { answerOf } from "../lib/answers.js";
import { isLoadable, matchPatterns, registrationPlan, SITES_KEY, siteRows, sitesGetFrame, storedSitesOf } from "../lib/sites.js";
import { ask } from "./questions.js";
import { loadSites } from "./site-descriptions.js";
import { local } from "./storage.js";

/** Reads the descriptions in force; unreadable, the three adapters with network capture go on alone. */
function load() {
  return loadSites().catch((error) => {
    console.warn("Conductor: the site descriptions could not be read:", error);
    return new Map();
  });
}

/** The descriptions in force; every use of the adapters waits for it (background.js). */
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

/** The sites switched on: all their origins granted, and the plugin's modules loadable there. */
async function grantedSites(sites) {
  const granted = new Set();
  for (const [name, description] of sites) {
    if (!isLoadable(description, ACCESSIBLE_PATTERNS)) continue;
    if (await chrome.permissions.contains({ origins: matchPatterns(description) })) granted.add(name);
  }
  return granted;
}

let syncing = Promise.resolve();

/**
 * Registers the content scripts of the sites switched on and unregisters
 * the others (lib/sites.js `registrationPlan`), one sync after the other.
 * Resolves with the options page's rows.
 */
export function syncScripts() {
  const run = async () => {
    const sites = await sitesReady;
    const granted = await grantedSites(sites);
    const registered = await chrome.scripting.getRegisteredContentScripts();
    const plan = registrationPlan({ sites, isOn: (name) => granted.has(name), registered });
    if (plan.unregister.length) await chrome.scripting.unregisterContentScripts({ ids: plan.unregister });
    if (plan.register.length) await chrome.scripting.registerContentScripts(plan.register);
    return siteRows(sites, (name) => granted.has(name), ACCESSIBLE_PATTERNS);
  };
  const next = syncing.then(run);
  syncing = next.catch((error) => console.warn("Conductor: the sites' content scripts were not brought up to date:", error));
  return next;
}

/** The site description in force for a page's URL, for its content script; null when none. */
export async function descriptionForPage(url) {
  let origin;
  try {
    origin = new URL(url).origin;
  } catch {
    return null;
  }
  for (const description of (await sitesReady).values()) if (description.origins.includes(origin)) return description;
  return null;
}
