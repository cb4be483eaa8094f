/**
 * The results of deliveries already performed, by `delivery_key` (SPEC §6:
 * a plugin that already posted a delivery answers a retry with its earlier
 * result instead of posting twice; §9: for a day).
 *
 * Kept in `store`, so a restarted service worker still remembers.
 */

import { serialisedUpdates } from "./serialised.js";

/** @typedef {import('./serialised.js').Store} Store */

const DAY_MS = 24 * 60 * 60 * 1000;

export class DeliveryMemory {
  /**
   * @param {Store} store
   * @param {{key?: string, ttlMs?: number, limit?: number, now?: () => number}} [options]
   *   `limit`: results kept; past it the oldest are forgotten first
   */
  constructor(store, { key = "deliveries", ttlMs = DAY_MS, limit = 500, now = Date.now } = {}) {
    if (!(Number.isInteger(limit) && limit > 0)) throw new RangeError(`delivery memory limit must be a positive integer, not ${limit}`);
    this.ttlMs = ttlMs;
    this.limit = limit;
    this.now = now;
    /** Changes the stored entries still within the TTL, one call at a time. */
    this.serialised = serialisedUpdates(store, key, (stored) => this.unexpired(stored));
  }

  /**
   * The stored entries still within the TTL (an entry stamped ahead of a clock set back stays).
   *
   * @returns {Array<{key: string, at: number, result: any}>}
   */
  unexpired(stored) {
    const now = this.now();
    return (Array.isArray(stored) ? stored : []).filter(
      (entry) => typeof entry?.key === "string" && Number.isFinite(entry.at) && now - entry.at < this.ttlMs,
    );
  }

  /**
   * @param {string} deliveryKey
   * @returns {Promise<any>} the result remembered for this key within the TTL, or null
   */
  recall(deliveryKey) {
    return this.serialised((entries) => entries.find((entry) => entry.key === deliveryKey)?.result ?? null, false);
  }

  /**
   * @param {string} deliveryKey
   * @param {any} result JSON-serialisable (it goes to chrome.storage)
   * @returns {Promise<void>}
   */
  remember(deliveryKey, result) {
    return this.serialised((entries) => {
      const index = entries.findIndex((entry) => entry.key === deliveryKey);
      if (index >= 0) entries.splice(index, 1);
      entries.push({ key: deliveryKey, at: this.now(), result });
      if (entries.length > this.limit) entries.splice(0, entries.length - this.limit);
    }, true);
  }
}
