// A `store` (plugin/README.md) over a Map, like chrome.storage.local: values
// are copied in and out, and every call yields to the event loop first, so
// overlapping operations interleave as they would in the extension.

export class MapStore {
  constructor() {
    this.map = new Map();
    this.writes = 0;
  }

  async get(key) {
    await new Promise((resolve) => setImmediate(resolve));
    return this.map.has(key) ? structuredClone(this.map.get(key)) : undefined;
  }

  async set(key, value) {
    await new Promise((resolve) => setImmediate(resolve));
    this.writes++;
    this.map.set(key, structuredClone(value));
  }
}
