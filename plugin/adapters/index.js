/**
 * The one list of platform adapters (STYLE rule 4: registries, not ladders):
 * the three with network capture, written as modules, and one generic page
 * adapter per site description in force (adapters/site.js, lib/sites.js).
 * Adding a platform with network capture: write `adapters/<name>/` (its
 * `index.js` to the interface in plugin/README.md; `page.js`, `stream.js`,
 * `delivery.js` beside it), import it here, add its origins to manifest.json. Adding a site read from the page: a description in
 * plugin/sites/ (bin/site-names lists it in plugin/sites/index.js, which
 * lib/site-descriptions.js reads for the worker, the options page and the panel).
 */

import chatgpt from "./chatgpt/index.js";
import claude from "./claude/index.js";
import gemini from "./gemini/index.js";
import { siteAdapter } from "./site.js";

/**
 * @param {import('./types.js').Adapter[]} adapters
 * @returns {ReadonlyMap<string, import('./types.js').Adapter>}
 */
export function registry(adapters) {
  const byName = new Map();
  for (const adapter of adapters) {
    if (!adapter?.name) throw new Error("a platform adapter has no name");
    if (byName.has(adapter.name)) throw new Error(`platform adapter "${adapter.name}" is registered twice`);
    byName.set(adapter.name, adapter);
  }
  return byName;
}

/** The adapters with network capture, always there. */
export const NETWORK_ADAPTERS = Object.freeze([claude, chatgpt, gemini]);

let BY_NAME = registry(NETWORK_ADAPTERS);

/**
 * Every adapter in force: NETWORK_ADAPTERS, then the sites' given to
 * `useSites` (a live binding: importers see the list `useSites` made).
 *
 * @type {readonly import('./types.js').Adapter[]}
 */
export let ADAPTERS = NETWORK_ADAPTERS;

/**
 * Puts the site adapters of these descriptions (lib/sites.js `sitesInForce`:
 * valid, one site per origin) in force beside the three, replacing the
 * sites' adapters used before. Called by whoever loaded the descriptions
 * (the worker, the side panel, the options page).
 *
 * @param {Iterable<unknown>} descriptions
 */
export function useSites(descriptions) {
  const adapters = [...NETWORK_ADAPTERS, ...[...descriptions].map((description) => siteAdapter(description))];
  BY_NAME = registry(adapters);
  ADAPTERS = Object.freeze(adapters);
}

/** The origins of the adapters with network capture, which no site description may take. */
export const NETWORK_ORIGINS = Object.freeze(NETWORK_ADAPTERS.flatMap((adapter) => adapter.origins));

/**
 * @param {string} name a SPEC §6 platform name
 * @returns {import('./types.js').Adapter}
 */
export function adapterByName(name) {
  const adapter = BY_NAME.get(name);
  if (!adapter) throw new Error(`unknown platform "${name}"; known: ${[...BY_NAME.keys()].sort().join(", ")}`);
  return adapter;
}

/**
 * @param {string} url a page URL
 * @returns {import('./types.js').Adapter | null} the adapter whose origins include the URL's, or null
 */
export function adapterForUrl(url) {
  let origin;
  try {
    origin = new URL(url).origin;
  } catch {
    return null;
  }
  return ADAPTERS.find((adapter) => adapter.origins.includes(origin)) ?? null;
}
