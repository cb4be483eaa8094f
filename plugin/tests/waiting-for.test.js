// Why a block or a delivery waits (lib/waiting-for.js): each code of
// SPEC §6 (docs/protocol.md's table) as the line the side panel shows, and a
// `waiting_for` that is not one read as nothing, or as an unknown reason.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { UNKNOWN_WAIT, WAITING_CODES, waitingForOf, waitingLine } from "../lib/waiting-for.js";

const formatTime = (ms) => `T${ms}`;
const APPROVE = "http://127.0.0.1:8000/admin/conversations/conversation/1/story/?task=9d#block-1";

/** The line for a raw `waiting_for` shown in message "5". */
function lineOf(raw, { isDelivery = false, hasFailed = false } = {}) {
  return waitingLine(waitingForOf(raw), { conductorMessageId: "5", isDelivery, hasFailed, formatTime });
}

describe("waitingLine", () => {
  const cases = [
    ["the dispatcher paused", { code: "paused", paused: "dispatcher" }, {}, "waits: Conductor's dispatcher is paused"],
    ["its kind paused", { code: "paused", paused: "kind" }, {}, "waits: this kind of task is paused in Conductor"],
    ["the conversation paused", { code: "paused", paused: "conversation" }, {}, "waits: the conversation is paused"],
    ["something else paused, of a newer server", { code: "paused", paused: "planet" }, {},
      "waits (for a reason this plugin does not know)"],
    ["behind an earlier message's block waiting for approval",
      { code: "earlier_block", approval: true, message_id: "m1", conductor_message_id: "4", index: 2, approve_url: APPROVE }, {},
      "waits for block 2 of an earlier message, which waits for your approval"],
    ["behind a block of its own message waiting for approval",
      { code: "earlier_block", approval: true, message_id: "m5", conductor_message_id: "5", index: 1, approve_url: APPROVE }, {},
      "waits for block 1 of this message, which waits for your approval"],
    ["behind an earlier unfinished block", { code: "earlier_block", approval: false, message_id: "m1", conductor_message_id: "4", index: 3 }, {},
      "waits for block 3 of an earlier message to finish"],
    ["a delivery behind an earlier delivery", { code: "earlier_block", approval: false, message_id: "m1", conductor_message_id: "4", index: null },
      { isDelivery: true }, "waits for an earlier delivery to finish"],
    ["a follow-up behind its message's first delivery", { code: "earlier_block", approval: false, conductor_message_id: "5", index: null },
      { isDelivery: true }, "waits for an earlier delivery of this message to finish"],
    ["a block's retry", { code: "backoff", until: 1_796_462_031_733 }, { hasFailed: true }, "retries at T1796462031733"],
    ["a block due later", { code: "backoff", until: 1_796_462_031_733 }, {}, "starts at T1796462031733"],
    ["a delivery's retry", { code: "backoff", until: 7 }, { isDelivery: true, hasFailed: true }, "retries at T7"],
    ["a delivery due later", { code: "backoff", until: 7 }, { isDelivery: true }, "delivers at T7"],
    ["a backoff without its end", { code: "backoff", until: "soon" }, { hasFailed: true }, "waits to try again"],
    ["no plugin", { code: "no_plugin" }, { isDelivery: true }, "waits: the plugin that delivers it is not connected"],
    ["the target busy", { code: "target_busy" }, { isDelivery: true }, "waits: another delivery to this chat is under way"],
    ["a code of a newer server, never echoed", { code: "<img src=x>" }, {}, "waits (for a reason this plugin does not know)"],
  ];
  for (const [name, raw, context, expected] of cases) it(name, () => assert.equal(lineOf(raw, context).text, expected));

  it("says something for every reason but approval", () => {
    const raws = [{ code: "approval" }, { code: "earlier_block", approval: true }, { code: "earlier_block" },
      ...["conversation", "kind", "dispatcher"].map((paused) => ({ code: "paused", paused })),
      { code: "backoff" }, { code: "no_plugin" }, { code: "target_busy" }];
    assert.deepEqual(raws.map((raw) => waitingForOf(raw).code).sort(), [...WAITING_CODES].sort());
    for (const raw of raws) {
      const line = lineOf({ ...raw, until: 1, index: 1, conductor_message_id: "4" });
      if (raw.code === "approval") assert.equal(line, null);
      else assert.ok(line.text.length > 0, raw.code);
    }
  });

  it("links the approval page of the block it waits behind, and nothing else", () => {
    const ahead = { code: "earlier_block", conductor_message_id: "4", index: 2 };
    assert.equal(lineOf({ ...ahead, approval: true, approve_url: APPROVE }).approveUrl, APPROVE);
    assert.equal(lineOf({ ...ahead, approval: true, approve_url: null }).approveUrl, null);
    assert.equal(lineOf({ ...ahead, approval: false, approve_url: APPROVE }).approveUrl, null);
    assert.equal(lineOf({ ...ahead, approval: true, approve_url: `http://h/${"a".repeat(3000)}` }).approveUrl, null);
  });

  it("says nothing for a block waiting for its own approval, or when nothing holds it", () => {
    assert.equal(lineOf({ code: "approval" }), null);
    assert.equal(lineOf(null), null);
  });
});

describe("waitingForOf", () => {
  it("reads nothing from what is not an object with a string code", () => {
    for (const raw of [null, undefined, "approval", 3, [], {}, { code: 1 }]) assert.equal(waitingForOf(raw), null);
  });

  it("keeps the known fields checked, and a code it does not know as unknown", () => {
    assert.deepEqual(waitingForOf({ code: "earlier_block", message_id: "m1", conductor_message_id: "4", index: 2.5, until: "x" }),
      { code: "behind_earlier", until: null, messageId: "m1", conductorMessageId: "4", index: null, approveUrl: null });
    assert.equal(waitingForOf({ code: "later_code" }).code, UNKNOWN_WAIT);
    assert.equal(waitingForOf({ code: "earlier_block", conductor_message_id: "9".repeat(100) }).conductorMessageId, null);
  });
});
