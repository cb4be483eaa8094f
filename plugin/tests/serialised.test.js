import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { serialisedUpdates } from "../lib/serialised.js";
import { MapStore } from "./stores.js";

const asList = (stored) => (Array.isArray(stored) ? stored : []);

describe("serialisedUpdates", () => {
  it("runs overlapping changes one after another, so none loses another's write", async () => {
    const store = new MapStore();
    const update = serialisedUpdates(store, "list", asList);
    await Promise.all(Array.from({ length: 20 }, (_, i) => update((list) => list.push(i), true)));
    assert.deepEqual(await store.get("list"), Array.from({ length: 20 }, (_, i) => i));
  });

  it("gives each change the normalised value and returns what the change returns, writing only when asked", async () => {
    const store = new MapStore();
    await store.set("list", "not a list");
    const update = serialisedUpdates(store, "list", asList);
    assert.equal(await update((list) => list.push("x"), false), 1);
    assert.equal(store.writes, 1);
    assert.equal(await store.get("list"), "not a list");
  });

  it("rejects only the call whose change or write failed", async () => {
    const store = new MapStore();
    const update = serialisedUpdates(store, "list", asList);
    const failing = update(() => {
      throw new Error("boom");
    }, true);
    const next = update((list) => list.push("after"), true);
    await assert.rejects(failing, /boom/);
    await next;
    assert.deepEqual(await store.get("list"), ["after"]);
  });
});
