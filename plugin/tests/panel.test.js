// The side panel's pure parts (lib/panel.js): a status answer and its
// instruction.status frames as the panel's state, drawn without a browser
// (fake-dom.js's buildingDocument refuses HTML), every hostile string as
// bounded text, and the approval link only on the paired server.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import {
  applyInstructionStatus, BLOCK_STATUSES, cleanText, DELIVERY_STATUSES, firstLine, MAX_MESSAGES, MAX_PARAMS_CHARS,
  MAX_PREVIEW_CHARS, messageStatusOf, panelStateOf, renderMessages, safeApproveUrl,
} from "../lib/panel.js";
import { buildingDocument, byClass, elementsUnder } from "./fake-dom.js";

const fixture = (name) => JSON.parse(readFileSync(new URL(`./fixtures/panel/${name}`, import.meta.url), "utf8"));
const SERVER = "http://127.0.0.1:8000";
const CONVERSATION = "4f1c2d3e-0000-4000-8000-00000000c0de";

function render(state, serverUrl = SERVER) {
  return renderMessages(buildingDocument(), state, { serverUrl });
}

function blockOf(list, conductorMessageId, index) {
  const [card] = elementsUnder(list, (node) => node.getAttribute("data-conductor-message-id") === conductorMessageId);
  return elementsUnder(card, (node) => node.getAttribute("data-index") === String(index))[0];
}

const text = (node, name) => byClass(node, name)[0]?.textContent;

/** An instruction.status frame for message `id` of the fixture's conversation. */
function push(id, blocks, { delivery = { status: "none", method: null, error: null }, approvals = 0, conversation = CONVERSATION } = {}) {
  return {
    type: "instruction.status", platform: "claude", conversation_id: conversation, approvals_waiting: approvals,
    message: { message_id: `m-${id}`, conductor_message_id: id, blocks, delivery },
  };
}

function block(status, { index = 1, updatedAt = 1000, ...rest } = {}) {
  return { index, target: "conductor", tool: "echo", params_preview: "{}", status, error: null, result_preview: null, approve_url: null, updated_at: updatedAt, ...rest };
}

describe("panelStateOf and renderMessages: every status", () => {
  const state = panelStateOf(fixture("status-every-state.json"));
  const list = render(state);

  it("keeps the answer's conversation, pause, count and messages, oldest first", () => {
    assert.equal(state.platform, "claude");
    assert.equal(state.conversationId, CONVERSATION);
    assert.equal(state.paused, false);
    assert.equal(state.approvalsWaiting, 2);
    assert.deepEqual(state.messages.map((message) => message.conductorMessageId), ["101", "102", "103", "104", "105"]);
    assert.deepEqual(byClass(list, "message").map((card) => card.getAttribute("data-conductor-message-id")), ["101", "102", "103", "104", "105"]);
  });

  it("shows each block's status as a chip with its label and a class of its own", () => {
    const seen = {};
    for (const item of byClass(list, "block")) {
      const status = item.getAttribute("data-status");
      const [chip] = byClass(item, "chip");
      assert.ok(chip.classList.includes(`chip-${status}`));
      assert.ok(item.classList.includes(`status-${status}`));
      seen[status] = chip.textContent;
    }
    assert.deepEqual(seen, BLOCK_STATUSES);
    assert.equal(seen.waiting_approval, "waiting for approval");
  });

  it("shows the tool, target::tool for an MCP server's, and the params on one line", () => {
    assert.equal(text(blockOf(list, "101", 2), "tool"), "files.list");
    assert.equal(text(blockOf(list, "101", 2), "params"), '{"path": "."}');
    assert.equal(text(blockOf(list, "102", 2), "tool"), "github::search_issues");
  });

  it("shows the result preview, or the error instead", () => {
    assert.equal(text(blockOf(list, "101", 1), "result"), '{"step": 1}');
    assert.equal(text(blockOf(list, "101", 2), "error"), "no such folder: ./missing");
    assert.equal(byClass(blockOf(list, "101", 2), "result").length, 0);
    assert.equal(text(blockOf(list, "101", 3), "error"), "the policy refuses shell.run here");
    assert.equal(byClass(blockOf(list, "102", 1), "result").length + byClass(blockOf(list, "102", 1), "error").length, 0);
  });

  it("links a block waiting for approval to its page on the paired server, and no other block", () => {
    const [link] = byClass(blockOf(list, "102", 3), "approve");
    assert.equal(link.nodeName, "A");
    assert.equal(link.textContent, "Approve in Conductor");
    assert.equal(link.getAttribute("href"), "http://127.0.0.1:8000/admin/conversations/conversation/7/story/#task-abc");
    assert.equal(link.getAttribute("rel"), "noopener noreferrer");
    // Another origin in the frame: the same page on the paired server.
    assert.equal(byClass(blockOf(list, "103", 1), "approve")[0].getAttribute("href"),
      "http://127.0.0.1:8000/admin/conversations/conversation/7/story/#task-def");
    assert.equal(byClass(list, "approve").length, 2);
  });

  it("says under each message what became of its delivery", () => {
    const deliveries = byClass(list, "delivery").map((line) => [line.getAttribute("data-delivery"), line.textContent]);
    assert.deepEqual(deliveries, [
      ["delivered", "Results delivered via http"],
      ["none", DELIVERY_STATUSES.none],
      ["waiting", DELIVERY_STATUSES.waiting],
      ["running", DELIVERY_STATUSES.running],
      ["failed", "Results not delivered: the composer holds a draft"],
    ]);
  });

  it("sums up each message's blocks", () => {
    assert.deepEqual(byClass(list, "summary").map((node) => node.textContent),
      ["4 blocks", "3 blocks, 1 waiting for approval", "1 block, 1 waiting for approval", "1 block", "1 block"]);
  });

  it("draws an answer without messages as an empty list", () => {
    const empty = panelStateOf({ type: "status", platform: "claude", conversation_id: "x", paused: true, messages: [] });
    assert.equal(empty.paused, true);
    assert.equal(empty.approvalsWaiting, null);
    assert.equal(render(empty).childNodes.length, 0);
  });
});

describe("hostile strings", () => {
  const state = applyInstructionStatus(panelStateOf({ platform: "claude", conversation_id: CONVERSATION, messages: [] }), fixture("instruction-status-hostile.json"));
  const list = render(state);

  it("become text nodes, never elements", () => {
    const names = new Set(elementsUnder(list).map((node) => node.nodeName));
    for (const name of ["IMG", "SCRIPT", "B", "I", "BLINK"]) assert.ok(!names.has(name), `no ${name} element`);
    assert.deepEqual([...byClass(list, "approve")].map((link) => link.nodeName), []);
    assert.equal(text(blockOf(list, "106", 1), "tool"), "<img src=x onerror=alert(1)>");
    assert.equal(text(blockOf(list, "106", 1), "params"), '<script>alert(2)</script> {"a": 1}');
    assert.equal(text(blockOf(list, "106", 2), "result"), '<a href="javascript:alert(4)">click</a>');
    assert.equal(text(list, "message-id"), "<b>bold</b>");
  });

  it("lose their bidi controls, keep their right-to-left letters, and sit in isolated elements", () => {
    assert.equal(text(blockOf(list, "106", 1), "error"), "gnp.exe <img src=x onerror=alert(3)>");
    assert.equal(text(blockOf(list, "106", 2), "tool"), "evil::שלום");
    assert.equal(text(blockOf(list, "106", 2), "params"), "{}");
    for (const name of ["tool", "params", "error", "result", "message-id", "delivery"]) {
      for (const node of byClass(list, name)) assert.equal(node.getAttribute("dir"), "auto", `${name} is isolated`);
    }
    assert.doesNotMatch(JSON.stringify(state), /[\u202a-\u202e\u2066-\u2069\u200e\u200f]/);
  });

  it("an unknown status is shown as unknown, a javascript: approval URL opens nothing", () => {
    const unknown = blockOf(list, "106", 4);
    assert.equal(unknown.getAttribute("data-status"), "unknown");
    assert.equal(text(unknown, "chip"), "unknown");
    const waiting = blockOf(list, "106", 3);
    assert.equal(byClass(waiting, "approve").length, 0);
    assert.equal(text(waiting, "approve-elsewhere"), "Approve it in Conductor's admin.");
    assert.equal(byClass(list, "delivery")[0].textContent, "Results not delivered: <img src=x onerror=alert(6)>");
  });

  it("a 10,000-character error shows its first line, bounded", () => {
    const long = "E".repeat(10_000);
    const shown = text(blockOf(render(applyInstructionStatus(state, push("107", [block("failed", { error: `${long}\nsecond` })]))), "107", 1), "error");
    assert.equal(Array.from(shown).length, MAX_PREVIEW_CHARS);
    assert.ok(shown.endsWith("…"));
    const multiline = text(blockOf(render(applyInstructionStatus(state, push("107", [block("failed", { error: "\n  first\nsecond" })]))), "107", 1), "error");
    assert.equal(multiline, "first");
  });

  it("every string is bounded, whatever its length", () => {
    const huge = "x".repeat(100_000);
    const message = messageStatusOf({
      message_id: huge, conductor_message_id: huge,
      blocks: [block("succeeded", { tool: huge, target: huge, params_preview: huge, result_preview: huge })],
      delivery: { status: "failed", error: huge },
    });
    const [shown] = message.blocks;
    assert.equal(Array.from(shown.paramsPreview).length, MAX_PARAMS_CHARS);
    assert.equal(Array.from(shown.resultPreview).length, MAX_PREVIEW_CHARS);
    assert.ok(shown.tool.length <= 80 && shown.target.length <= 80 && message.conductorMessageId.length <= 80);
    assert.equal(Array.from(message.delivery.error).length, MAX_PREVIEW_CHARS);
  });

  it("refuses to be drawn as HTML", () => {
    const document = buildingDocument();
    assert.throws(() => (document.createElement("p").innerHTML = "<b>x</b>"), /not allowed/);
  });
});

describe("cleanText and firstLine", () => {
  const cases = [
    ["plain", "files.list", 10, "files.list"],
    ["cut with an ellipsis", "abcdef", 4, "abc…"],
    ["code points, not UTF-16 units", "😀😀😀😀", 3, "😀😀…"],
    ["a lone surrogate replaced", "a\ud800b", 10, "a\ufffdb"],
    ["controls removed", "a\u0000b\u001bc\u009fd", 10, "abcd"],
    ["bidi controls removed", "\u202eabc\u202c\u2066d\u2069\u200f\u061c", 10, "abcd"],
    ["a string of only controls", "\u202e\u202e", 10, ""],
  ];
  for (const [name, value, limit, expected] of cases) it(name, () => assert.equal(cleanText(value, limit), expected));

  it("keeps line breaks unless on one line", () => {
    assert.equal(cleanText("a\r\nb\n\n", 10), "a\nb");
    assert.equal(cleanText("a\r\n  b\tc", 10, { isOneLine: true }), "a b c");
  });

  it("gives nothing for what is not a string", () => {
    for (const value of [null, undefined, 3, {}, ["a"]]) assert.equal(cleanText(value, 10), "");
    assert.equal(firstLine(null), null);
    assert.equal(firstLine("   "), null);
  });

  it("bounds a huge string cheaply, and marks it cut even when cleaning shortened it", () => {
    assert.equal(cleanText("\u202e".repeat(1000) + "tail", 10), "…");
    assert.equal(Array.from(cleanText("y".repeat(5_000_000), 300)).length, 300);
  });
});

describe("applyInstructionStatus", () => {
  const empty = { platform: "claude", conversationId: CONVERSATION, paused: false, messages: [], approvalsWaiting: 0 };

  it("appends a new message as the newest and replaces a known one in its place", () => {
    let state = applyInstructionStatus(empty, push("1", [block("queued")]));
    state = applyInstructionStatus(state, push("2", [block("queued")]));
    state = applyInstructionStatus(state, push("1", [block("running", { updatedAt: 2000 })], { approvals: 1 }));
    assert.deepEqual(state.messages.map((message) => [message.conductorMessageId, message.blocks[0].status]), [["1", "running"], ["2", "queued"]]);
    assert.equal(state.approvalsWaiting, 1);
  });

  it("keeps the newest MAX_MESSAGES", () => {
    let state = empty;
    for (let i = 1; i <= MAX_MESSAGES + 5; i++) state = applyInstructionStatus(state, push(String(i), [block("queued")]));
    assert.equal(state.messages.length, MAX_MESSAGES);
    assert.equal(state.messages[0].conductorMessageId, "6");
    assert.equal(state.messages.at(-1).conductorMessageId, String(MAX_MESSAGES + 5));
  });

  it("ignores another conversation's message but takes the owner's count from it", () => {
    const before = applyInstructionStatus(empty, push("1", [block("queued")]));
    const after = applyInstructionStatus(before, push("9", [block("waiting_approval")], { conversation: "another", approvals: 4 }));
    assert.deepEqual(after.messages, before.messages);
    assert.equal(after.approvalsWaiting, 4);
    const samePlatformOnly = applyInstructionStatus(before, { ...push("9", [block("queued")]), platform: "chatgpt", approvals_waiting: 0 });
    assert.deepEqual(samePlatformOnly.messages, before.messages);
  });

  it("changes nothing for a frame it cannot read", () => {
    const state = applyInstructionStatus(empty, push("1", [block("queued")]));
    for (const frame of [null, "x", { type: "status" }, { ...push("2", []), message: { blocks: [] } }, { ...push("2", []), message: null }]) {
      assert.equal(applyInstructionStatus(state, frame), state);
    }
  });

  it("keeps the later state when an older one comes after it, and takes a delivery's change at the same time", () => {
    let state = applyInstructionStatus(empty, push("1", [block("succeeded", { updatedAt: 3000 })]));
    state = applyInstructionStatus(state, push("1", [block("running", { updatedAt: 2000 })]));
    assert.equal(state.messages[0].blocks[0].status, "succeeded");
    state = applyInstructionStatus(state, push("1", [block("succeeded", { updatedAt: 3000 })], { delivery: { status: "delivered", method: "dom", error: null } }));
    assert.equal(state.messages[0].delivery.status, "delivered");
  });

  it("leaves the state it was given unchanged", () => {
    const state = applyInstructionStatus(empty, push("1", [block("queued")]));
    const frozen = JSON.stringify(state);
    applyInstructionStatus(state, push("1", [block("running", { updatedAt: 5000 })]));
    assert.equal(JSON.stringify(state), frozen);
  });
});

describe("why a block or a delivery waits, and results not yet delivered", () => {
  const APPROVE = "https://proxy.example/admin/conversations/conversation/7/story/?task=9d#block-1";
  const empty = { platform: "claude", conversationId: CONVERSATION, paused: false, messages: [], approvalsWaiting: 0 };
  const formatTime = (ms) => (ms === 1_796_462_031_733 ? "14:05" : `T${ms}`);
  let state = applyInstructionStatus(empty, push("1", [block("waiting_approval", { approve_url: APPROVE, waiting_for: { code: "approval" } })]));
  state = applyInstructionStatus(state, push("2", [
    block("queued", { waiting_for: { code: "earlier_block", approval: true, message_id: "m-1", conductor_message_id: "1", index: 1, approve_url: APPROVE } }),
    block("queued", { index: 2, error: "timed out", waiting_for: { code: "backoff", until: 1_796_462_031_733 } }),
    block("queued", { index: 3, waiting_for: { code: "paused", paused: "conversation" } }),
    block("succeeded", { index: 4, waiting_for: null }),
  ], { delivery: { status: "none", method: null, error: null, waiting_for: null, results_not_delivered: 0 } }));
  state = applyInstructionStatus(state, push("3", [block("succeeded")],
    { delivery: { status: "waiting", method: null, error: null, waiting_for: { code: "no_plugin" }, results_not_delivered: 0 } }));
  const list = renderMessages(buildingDocument(), state, { serverUrl: SERVER, formatTime });
  const lineUnder = (node) => byClass(node, "waiting-for")[0];

  it("says under a block held behind another's approval which one, with a link to approve it on the paired server", () => {
    const line = lineUnder(blockOf(list, "2", 1));
    assert.equal(line.getAttribute("data-waiting-for"), "behind_approval");
    assert.equal(line.textContent, "waits for block 1 of an earlier message, which waits for your approval: approve it");
    const [link] = byClass(line, "approve-ahead");
    assert.equal(link.nodeName, "A");
    assert.equal(link.getAttribute("href"), "http://127.0.0.1:8000/admin/conversations/conversation/7/story/?task=9d#block-1");
    assert.equal(link.getAttribute("rel"), "noopener noreferrer");
  });

  it("says when a retry comes and that the conversation is paused", () => {
    assert.equal(lineUnder(blockOf(list, "2", 2)).textContent, "retries at 14:05");
    assert.equal(lineUnder(blockOf(list, "2", 3)).textContent, "waits: the conversation is paused");
  });

  it("says nothing under the block waiting for its own approval, nor under one nothing holds", () => {
    assert.equal(byClass(blockOf(list, "1", 1), "waiting-for").length, 0);
    assert.equal(byClass(blockOf(list, "1", 1), "approve").length, 1);
    assert.equal(byClass(blockOf(list, "2", 4), "waiting-for").length, 0);
    const [card] = elementsUnder(list, (node) => node.getAttribute("data-conductor-message-id") === "2");
    assert.equal(byClass(card, "delivery-waiting-for").length, 0);
  });

  it("says under the delivery line why the delivery waits", () => {
    const [card] = elementsUnder(list, (node) => node.getAttribute("data-conductor-message-id") === "3");
    const [line] = byClass(card, "delivery-waiting-for");
    assert.equal(line.textContent, "waits: the plugin that delivers it is not connected");
    assert.equal(line.getAttribute("data-waiting-for"), "no_plugin");
  });

  it("shows no link for an approval page that is not http(s), and still says why", () => {
    const held = applyInstructionStatus(empty, push("4", [
      block("queued", { waiting_for: { code: "earlier_block", approval: true, conductor_message_id: "4", index: 2, approve_url: "javascript:alert(1)" } })]));
    const line = lineUnder(blockOf(render(held), "4", 1));
    assert.equal(line.textContent, "waits for block 2 of this message, which waits for your approval");
    assert.equal(byClass(line, "approve-ahead").length, 0);
  });

  it("does not say 'delivered' while retried blocks' results wait for a follow-up", () => {
    const delivered = { status: "delivered", method: "http", error: null, waiting_for: null };
    const footer = (count) => {
      const shown = applyInstructionStatus(empty, push("5", [block("succeeded")], { delivery: { ...delivered, results_not_delivered: count } }));
      const [line] = byClass(render(shown), "delivery");
      return [line.textContent, line.getAttribute("class")];
    };
    assert.deepEqual(footer(2), ["2 results not yet delivered", "delivery delivery-results-not-delivered"]);
    assert.deepEqual(footer(1), ["1 result not yet delivered", "delivery delivery-results-not-delivered"]);
    assert.deepEqual(footer(0), ["Results delivered via http", "delivery delivery-delivered"]);
    for (const count of [-1, 1.5, "3", null]) assert.equal(footer(count)[0], "Results delivered via http");
    // The follow-up itself under way says so.
    const running = applyInstructionStatus(empty, push("6", [block("succeeded")],
      { delivery: { status: "running", method: null, error: null, waiting_for: null, results_not_delivered: 2 } }));
    assert.equal(byClass(render(running), "delivery")[0].textContent, DELIVERY_STATUSES.running);
  });
});

describe("safeApproveUrl", () => {
  const cases = [
    ["the paired server's own URL", "http://127.0.0.1:8000/admin/x/?a=1#t", SERVER, "http://127.0.0.1:8000/admin/x/?a=1#t"],
    ["another host: its path on the paired server", "https://proxy.example/admin/x/#t", SERVER, "http://127.0.0.1:8000/admin/x/#t"],
    ["another scheme of the same host", "https://127.0.0.1:8000/admin/x/", SERVER, "http://127.0.0.1:8000/admin/x/"],
    ["credentials in the URL dropped", "http://user:pw@127.0.0.1:8000/admin/", SERVER, "http://127.0.0.1:8000/admin/"],
    ["a path that looks like a host stays a path", "http://evil.example//evil.example/x", SERVER, "http://127.0.0.1:8000//evil.example/x"],
    ["javascript:", "javascript:alert(1)", SERVER, null],
    ["data:", "data:text/html,<b>x</b>", SERVER, null],
    ["not a URL", "/admin/x/", SERVER, null],
    ["no paired server", "http://127.0.0.1:8000/admin/", "", null],
    ["a paired server that is not http", "http://127.0.0.1:8000/admin/", "ftp://h/", null],
    ["too long", `http://127.0.0.1:8000/${"a".repeat(3000)}`, SERVER, null],
    ["not a string", 42, SERVER, null],
  ];
  for (const [name, url, server, expected] of cases) it(name, () => assert.equal(safeApproveUrl(url, server), expected));
});
