/**
 * The results of deliveries already performed, by `delivery_key` (SPEC §6:
 * a plugin that already posted a delivery answers a retry with its earlier
 * result instead of posting twice; §9: for a day).
 *
 * Kept in `store`, so a restarted service worker still remembers.
 */

/** @typedef {{get(key: string): Promise<any>, set(key: string, value: any): Promise<void>}} Store */

const DAY_MS = 24 * 60 * 60 * 1000;

export class DeliveryMemory {
  /**
   * @param {Store} store
   * @param {{key?: string, ttlMs?: number, limit?: number, now?: () => number}} [options]
   *   `limit`: results kept; past it the oldest are forgotten first
   */
  constructor(store, { key = "deliveries", ttlMs = DAY_MS, limit = 500, now = Date.now } = {}) {
    if (!(Number.isInteger(limit) && limit > 0)) throw new RangeError(`delivery memory limit must be a positive integer, not ${limit}`);
    this.store = store;
    this.key = key;
    this.ttlMs = ttlMs;
    this.limit = limit;
    this.now = now;
    /** @type {Promise<unknown>} */
    this.tail = Promise.resolve();
  }

  /**
   * Runs `change` on the stored entries after every earlier operation: each
   * reads and writes the whole list, so overlapping calls would lose writes.
   *
   * @template T
   * @param {(entries: Array<{key: string, at: number, result: any}>) => T} change
   * @param {boolean} writes
   * @returns {Promise<T>}
   */
  serialised(change, writes) {
    const run = this.tail.then(async () => {
      const entries = this.unexpired(await this.store.get(this.key));
      const result = change(entries);
      if (writes) await this.store.set(this.key, entries);
      return result;
    });
    this.tail = run.catch(() => {});
    return run;
  }

  /** The stored entries still within the TTL (an entry stamped ahead of a clock set back stays). */
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
