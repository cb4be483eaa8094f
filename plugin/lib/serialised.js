/**
 * One value in a `store`, changed by one operation at a time: each operation
 * reads the whole value, changes it and writes it back, so two that
 * overlapped would lose one's write. The outbox and the delivery memory keep
 * their lists this way.
 */

/** @typedef {{get(key: string): Promise<any>, set(key: string, value: any): Promise<void>}} Store */

/**
 * Runs each `change` on the value under `key` after every earlier one has
 * finished, and writes the value back when `writes`. One per store and key:
 * a second one in the same worker would not share this queue. A failed
 * operation rejects its own call only.
 *
 * @template V
 * @param {Store} store
 * @param {string} key
 * @param {(stored: any) => V} normalise the value to change, from whatever the store holds (nothing, or something else)
 * @returns {<T>(change: (value: V) => T, writes: boolean) => Promise<T>}
 */
export function serialisedUpdates(store, key, normalise) {
  /** @type {Promise<unknown>} */
  let tail = Promise.resolve();
  return (change, writes) => {
    const run = tail.then(async () => {
      const value = normalise(await store.get(key));
      const result = change(value);
      if (writes) await store.set(key, value);
      return result;
    });
    tail = run.catch(() => {});
    return run;
  };
}
