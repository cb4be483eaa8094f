import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ADAPTERS } from "../adapters/index.js";
import { Deliveries, DELIVERY_KINDS, deliveryFailureReport, REMEMBERED_BODY_CHARS } from "../lib/deliveries.js";
import { DeliveryMemory } from "../lib/delivery-memory.js";
import { MapStore } from "./stores.js";

const { proxy, dom } = DELIVERY_KINDS;
const posted = (body = "{}") => ({ ok: true, status: 200, body, error: null });
const typed = () => ({ ok: true, error: null, error_code: null, evidence: { user_turn_seen: true } });
const frame = (key, extra = {}) => ({ platform: "claude", conversation_id: "c1", delivery_key: key, ...extra });

function deliveries() {
  return new Deliveries(new DeliveryMemory(new MapStore(), { key: "deliveries" }));
}

/** A perform that counts its calls and answers `result` when released. */
function performer(result) {
  let release;
  const gate = new Promise((resolve) => (release = resolve));
  const perform = async () => {
    perform.calls++;
    await gate;
    return typeof result === "function" ? result() : result;
  };
  perform.calls = 0;
  perform.release = release;
  return perform;
}

describe("Deliveries", () => {
  it("performs a repeat that comes while the first runs once, and answers both alike", async () => {
    const once = deliveries();
    const perform = performer(posted());
    const first = once.deliver(frame("k"), proxy, perform);
    const second = once.deliver(frame("k"), proxy, perform);
    perform.release();
    assert.deepEqual(await first, posted());
    assert.deepEqual(await second, posted());
    assert.equal(perform.calls, 1);
  });

  it("answers a repeat after a delivery that reached the chat from memory", async () => {
    const once = deliveries();
    const perform = performer(typed());
    perform.release();
    await once.deliver(frame("k"), dom, perform);
    assert.deepEqual(await once.deliver(frame("k"), dom, perform), typed());
    assert.equal(perform.calls, 1);
  });

  it("tries a failed delivery again", async () => {
    const once = deliveries();
    const perform = performer(proxy.failed("the page did not answer"));
    perform.release();
    await once.deliver(frame("k"), proxy, perform);
    await once.deliver(frame("k"), proxy, perform);
    assert.equal(perform.calls, 2);
  });

  it("performs every delivery without a key", async () => {
    const once = deliveries();
    const perform = performer(posted());
    perform.release();
    await once.deliver(frame(undefined), proxy, perform);
    await once.deliver(frame(undefined), proxy, perform);
    assert.equal(perform.calls, 2);
  });

  it("answers a thrown delivery as its kind's failure", async () => {
    const once = deliveries();
    const result = await once.deliver(frame("k"), dom, async () => {
      throw new Error("tab closed");
    });
    assert.deepEqual(result, dom.failed("the delivery failed in the browser: tab closed"));
  });

  it("never posts a text the composer sent under the same key: blocked, so the server moves on", async () => {
    const once = deliveries();
    const typing = performer(typed());
    typing.release();
    await once.deliver(frame("k"), dom, typing);
    const posting = performer(posted());
    posting.release();
    const result = await once.deliver(frame("k"), proxy, posting);
    assert.equal(posting.calls, 0);
    assert.equal(result.ok, false);
    assert.equal(result.error_code, "blocked");
  });

  it("leaves a DOM delivery after a post of the same key to the page's own check", async () => {
    const once = deliveries();
    const posting = performer(posted());
    posting.release();
    await once.deliver(frame("k"), proxy, posting);
    const typing = performer(typed());
    typing.release();
    assert.deepEqual(await once.deliver(frame("k"), dom, typing), typed());
    assert.equal(typing.calls, 1);
  });

  it("remembers the start of a proxy answer's body only", async () => {
    const once = deliveries();
    const long = posted("x".repeat(REMEMBERED_BODY_CHARS + 10));
    const perform = performer(long);
    perform.release();
    assert.deepEqual(await once.deliver(frame("k"), proxy, perform), long);
    const repeat = await once.deliver(frame("k"), proxy, perform);
    assert.equal(repeat.body.length, REMEMBERED_BODY_CHARS);
  });
});

describe("deliveryFailureReport", () => {
  const claude = ADAPTERS.find((adapter) => adapter.name === "claude");

  it("counts a refusal as delivery_blocked with its reason", () => {
    const result = { ...proxy.failed("the plugin refused this delivery: ...", "blocked"), refused: "refused_path" };
    assert.deepEqual(deliveryFailureReport(frame("k"), result, "http", ADAPTERS), {
      platform: "claude", adapter: claude.version, kind: "delivery_blocked", detail: { method: "http", reason: "refused_path" },
    });
  });

  it("counts a missing page value with the status the app answered", () => {
    const result = { ok: false, status: 403, body: null, error: "no token", error_code: "page_value_missing" };
    assert.deepEqual(deliveryFailureReport(frame("k"), result, "http", ADAPTERS).detail, { method: "http", status: 403 });
  });

  it("counts nothing for other failures, unknown platforms or inherited names", () => {
    assert.equal(deliveryFailureReport(frame("k"), dom.failed("no composer", "selector_missing"), "dom", ADAPTERS), null);
    assert.equal(deliveryFailureReport(frame("k"), posted(), "http", ADAPTERS), null);
    assert.equal(deliveryFailureReport(frame("k", { platform: "bard" }), proxy.failed("x", "blocked"), "http", ADAPTERS), null);
    assert.equal(deliveryFailureReport(frame("k"), proxy.failed("x", "constructor"), "http", ADAPTERS), null);
  });
});
