/**
 * The site descriptions in force, read where they are kept: the packaged
 * plugin/sites/<name>.json (the extension's own files, fetched from its own
 * origin: not web-accessible; their names from sites/index.js, which
 * bin/site-names generates from the folder) and the server's, in chrome.storage.local
 * (lib/sites.js SITES_KEY, written by worker/site-sync.js only). Used by the
 * worker, the options page and the side panel, which each put the sites'
 * adapters in force (`useSites`).
 */

import { NETWORK_ORIGINS, useSites } from "../adapters/index.js";
import { SITES_KEY, sitesInForce } from "./sites.js";
import { SITE_NAMES } from "../sites/index.js";

/** The packaged descriptions, by name (read once per page or worker: they change only with the plugin). */
let builtIn = null;

async function readBuiltIn() {
  builtIn ??= Promise.all(
    SITE_NAMES.map(async (name) => [name, await (await fetch(chrome.runtime.getURL(`sites/${name}.json`))).json()]),
  ).then(Object.fromEntries);
  return builtIn;
}

/**
 * Reads the descriptions, puts their adapters in force and returns them by
 * name, with what was left out and why (`dropped`: a description that does
 * not validate, or claims an origin of the adapters with network capture
 * or of another site; the built-in one of that name, if any, stays). Each
 * left out is logged, and the options page lists them.
 *
 * @returns {Promise<{sites: Map<string, Readonly<Record<string, any>>>, dropped: import('./sites.js').Dropped[]}>}
 */
export async function loadSites() {
  const { [SITES_KEY]: stored } = await chrome.storage.local.get(SITES_KEY);
  const { sites, dropped } = sitesInForce(await readBuiltIn(), stored, { reservedOrigins: NETWORK_ORIGINS });
  for (const { name, problems } of dropped) console.warn("Conductor: a site description is not used:", name, problems.slice(0, 3).join("; "));
  useSites(sites.values());
  return { sites, dropped };
}
