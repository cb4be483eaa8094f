import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { DeliveryMemory } from "../lib/delivery-memory.js";
import { MapStore } from "./stores.js";

const HOUR = 60 * 60 * 1000;

function clock(start = 1_000_000) {
  const time = { now: start };
  return { time, now: () => time.now };
}

const result = (status) => ({ ok: true, status, body: "", error: null });

describe("DeliveryMemory", () => {
  it("recalls a result for a day and forgets it after", async () => {
    const { time, now } = clock();
    const memory = new DeliveryMemory(new MapStore(), { key: "deliveries", now });
    assert.equal(await memory.recall("task-1"), null);
    await memory.remember("task-1", result(200));
    time.now += 24 * HOUR - 1;
    assert.deepEqual(await memory.recall("task-1"), result(200));
    time.now += 1;
    assert.equal(await memory.recall("task-1"), null);
  });

  it("takes its TTL", async () => {
    const { time, now } = clock();
    const memory = new DeliveryMemory(new MapStore(), { key: "deliveries", ttlMs: 1000, now });
    await memory.remember("k", result(200));
    time.now += 999;
    assert.deepEqual(await memory.recall("k"), result(200));
    time.now += 1;
    assert.equal(await memory.recall("k"), null);
  });

  it("keeps at most `limit` results, forgetting the oldest", async () => {
    const { time, now } = clock();
    const store = new MapStore();
    const memory = new DeliveryMemory(store, { key: "deliveries", limit: 2, now });
    for (const key of ["a", "b", "c"]) {
      await memory.remember(key, result(200));
      time.now += 1;
    }
    assert.equal(await memory.recall("a"), null);
    assert.deepEqual(await memory.recall("c"), result(200));
    assert.equal((await store.get("deliveries")).length, 2);
  });

  it("drops expired results from the store when it writes", async () => {
    const { time, now } = clock();
    const store = new MapStore();
    const memory = new DeliveryMemory(store, { key: "deliveries", now });
    await memory.remember("old", result(200));
    time.now += 25 * HOUR;
    await memory.remember("new", result(500));
    assert.deepEqual((await store.get("deliveries")).map((entry) => entry.key), ["new"]);
  });

  it("survives a new instance on the same store and overlapping writes", async () => {
    const { now } = clock();
    const store = new MapStore();
    const memory = new DeliveryMemory(store, { key: "deliveries", now });
    await Promise.all(["a", "b", "c", "d"].map((key) => memory.remember(key, result(200))));
    const restarted = new DeliveryMemory(store, { key: "deliveries", now });
    for (const key of ["a", "b", "c", "d"]) assert.deepEqual(await restarted.recall(key), result(200));
  });

  it("remembering a key again replaces its result", async () => {
    const { now } = clock();
    const memory = new DeliveryMemory(new MapStore(), { key: "deliveries", now });
    await memory.remember("k", result(500));
    await memory.remember("k", result(200));
    assert.deepEqual(await memory.recall("k"), result(200));
  });
});
