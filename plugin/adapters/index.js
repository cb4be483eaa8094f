/**
 * The one list of platform adapters (STYLE rule 4: registries, not ladders).
 * Adding a platform: write `adapters/<name>.js` to the interface in
 * plugin/README.md, import it here, add its origins to manifest.json.
 */

import chatgpt from "./chatgpt.js";
import claude from "./claude.js";
import gemini from "./gemini.js";

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

const BY_NAME = registry([claude, chatgpt, gemini]);

/** @type {readonly import('./types.js').Adapter[]} */
export const ADAPTERS = Object.freeze([...BY_NAME.values()]);

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
