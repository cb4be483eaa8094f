import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Outbox, refusedFrameAction } from "../lib/outbox.js";
import { MapStore } from "./stores.js";

const frame = (id) => ({ type: "browser.final_message", id, text: `text ${id}` });

describe("Outbox", () => {
  it("keeps frames until they are acknowledged, oldest first", async () => {
    const outbox = new Outbox(new MapStore(), { key: "outbox", limit: 10 });
    await outbox.add(frame("a"));
    await outbox.add(frame("b"));
    await outbox.add(frame("c"));
    assert.equal(await outbox.ack("b"), true);
    assert.equal(await outbox.ack("b"), false);
    assert.deepEqual((await outbox.pending()).map((kept) => kept.id), ["a", "c"]);
  });

  it("drops the oldest frames past its limit and counts them", async () => {
    const outbox = new Outbox(new MapStore(), { key: "outbox", limit: 3 });
    for (const id of ["1", "2", "3", "4", "5"]) await outbox.add(frame(id));
    assert.deepEqual((await outbox.pending()).map((kept) => kept.id), ["3", "4", "5"]);
    assert.equal(await outbox.dropped(), 2);
  });

  it("drops the oldest frames past its size bound, but never the newest", async () => {
    const big = (id) => ({ ...frame(id), text: "x".repeat(400) });
    const outbox = new Outbox(new MapStore(), { key: "outbox", limit: 100, maxChars: 1000 });
    for (const id of ["1", "2", "3", "4"]) await outbox.add(big(id));
    assert.deepEqual((await outbox.pending()).map((kept) => kept.id), ["3", "4"]);
    assert.equal(await outbox.dropped(), 2);
    const huge = { ...frame("5"), text: "x".repeat(5000) };
    await outbox.add(huge);
    assert.deepEqual(await outbox.pending(), [huge]);
    assert.equal(await outbox.dropped(), 4);
  });

  it("replaces a frame added again under the same id instead of keeping it twice", async () => {
    const outbox = new Outbox(new MapStore(), { key: "outbox", limit: 3 });
    await outbox.add(frame("a"));
    await outbox.add({ ...frame("a"), text: "newer" });
    assert.deepEqual(await outbox.pending(), [{ ...frame("a"), text: "newer" }]);
  });

  it("loses nothing when adds and acks overlap", async () => {
    const outbox = new Outbox(new MapStore(), { key: "outbox", limit: 1000 });
    const ids = Array.from({ length: 50 }, (_, i) => `f${i}`);
    await Promise.all(ids.map((id) => outbox.add(frame(id))));
    assert.deepEqual((await outbox.pending()).map((kept) => kept.id), ids);
    const acked = ids.filter((_, i) => i % 2 === 0);
    await Promise.all([...acked.map((id) => outbox.ack(id)), outbox.add(frame("late"))]);
    assert.deepEqual(
      (await outbox.pending()).map((kept) => kept.id),
      [...ids.filter((_, i) => i % 2 === 1), "late"],
    );
  });

  it("keeps working after a failed store write", async () => {
    const store = new MapStore();
    const outbox = new Outbox(store, { key: "outbox", limit: 10 });
    const set = store.set;
    store.set = async () => {
      throw new Error("quota");
    };
    await assert.rejects(outbox.add(frame("a")), /quota/);
    store.set = set;
    await outbox.add(frame("b"));
    assert.deepEqual((await outbox.pending()).map((kept) => kept.id), ["b"]);
  });

  it("gives the pending frames to a new Outbox on the same store (a restarted worker)", async () => {
    const store = new MapStore();
    const before = new Outbox(store, { key: "outbox", limit: 10 });
    await before.add(frame("a"));
    await before.add(frame("b"));
    await before.ack("a");
    const after = new Outbox(store, { key: "outbox", limit: 10 });
    assert.deepEqual(await after.pending(), [frame("b")]);
    await after.ack("b");
    assert.deepEqual(await new Outbox(store, { key: "outbox", limit: 10 }).pending(), []);
  });

  it("rejects a frame without an id and a limit that is not a positive integer", async () => {
    const outbox = new Outbox(new MapStore(), { key: "outbox", limit: 2 });
    await assert.rejects(outbox.add({ type: "x" }), TypeError);
    assert.throws(() => new Outbox(new MapStore(), { key: "outbox", limit: 0 }), RangeError);
  });

  it("reads a store holding something else as empty", async () => {
    const store = new MapStore();
    await store.set("outbox", { frames: "nope", dropped: -1 });
    const outbox = new Outbox(store, { key: "outbox", limit: 2 });
    assert.deepEqual(await outbox.pending(), []);
    assert.equal(await outbox.dropped(), 0);
  });
});

describe("refusedFrameAction", () => {
  it("drops frames the server will never take, retries those it may take later, ignores the rest", () => {
    for (const code of ["invalid", "bad_frame", "too_large", "unknown_type"]) assert.equal(refusedFrameAction(code), "drop");
    for (const code of ["rate_limited", "server_error"]) assert.equal(refusedFrameAction(code), "retry");
    for (const code of ["unauthorized", "constructor", undefined, ""]) assert.equal(refusedFrameAction(code), null);
  });
});
