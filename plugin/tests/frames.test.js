// The frames the plugin sends (lib/frames.js), against SPEC §6's field names.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ADAPTERS } from "../adapters/index.js";
import { domResultFrame, finalMessageFrame, helloFrame, isLoopback, isOverFrameLimit, isPosted, isSentToComposer, MAX_FRAME_BYTES, proxyResultFrame, socketUrl } from "../lib/frames.js";

describe("helloFrame", () => {
  it("names the client, its platforms, capabilities and adapter versions", () => {
    const frame = helloFrame({ clientId: "laptop", token: "secret", version: "1.0.0", adapters: ADAPTERS });
    assert.deepEqual(frame, {
      type: "hello", client_id: "laptop", token: "secret", plugin_version: "1.0.0",
      platforms: ["claude", "chatgpt", "gemini"], capabilities: ["proxy_delivery", "dom_delivery"],
      adapters: Object.fromEntries(ADAPTERS.map((adapter) => [adapter.name, adapter.version])),
    });
  });
});

describe("finalMessageFrame", () => {
  const capture = { conversation_id: "c-1", message_id: "m-1", parent_message_id: "", organization_id: "org", text: "hi" };

  it("carries the capture and how it was read, leaving unknown ids out", () => {
    const frame = finalMessageFrame({
      id: "f-1", platform: "claude", capture, method: "dom", pageUrl: "https://claude.ai/chat/c-1", title: "",
      observedAt: "2026-12-01T10:00:00.000Z",
    });
    assert.deepEqual(frame, {
      type: "browser.final_message", id: "f-1", platform: "claude", conversation_id: "c-1", text: "hi",
      capture: "dom", observed_at: "2026-12-01T10:00:00.000Z", message_id: "m-1", organization_id: "org",
      page_url: "https://claude.ai/chat/c-1",
    });
  });
});

describe("proxyResultFrame", () => {
  it("answers with the status and body", () => {
    assert.deepEqual(proxyResultFrame("r-1", { ok: true, status: 200, body: "data: {}", error: null }), {
      type: "browser.proxy_delivery.result", request_id: "r-1", ok: true, status: 200, body: "data: {}", error: null,
    });
  });

  it("never claims ok with an error_code", () => {
    const frame = proxyResultFrame("r-2", { ok: true, status: 403, body: "", error: "refused", error_code: "blocked" });
    assert.equal(frame.ok, false);
    assert.equal(frame.error_code, "blocked");
  });

  it("sends null for a status or body of the wrong type", () => {
    const frame = proxyResultFrame("r-3", { ok: false, status: "200", body: 5, error: undefined });
    assert.deepEqual([frame.status, frame.body, frame.error], [null, null, null]);
  });
});

describe("domResultFrame", () => {
  it("answers ok with the evidence of the user turn", () => {
    assert.deepEqual(domResultFrame("r-1", { ok: true, error: null, error_code: null, evidence: { user_turn_seen: true, already_sent: true } }), {
      type: "browser.dom_delivery.result", request_id: "r-1", ok: true, error: null, error_code: null,
      evidence: { user_turn_seen: true, already_sent: true },
    });
  });

  it("never claims ok without the user turn seen, nor with an error_code", () => {
    const unseen = domResultFrame("r-2", { ok: true, error: null, error_code: null, evidence: {} });
    assert.deepEqual([unseen.ok, unseen.error], [false, "the delivery failed"]);
    const blocked = domResultFrame("r-3", { ok: true, error: "a challenge", error_code: "blocked", evidence: { user_turn_seen: true } });
    assert.deepEqual([blocked.ok, blocked.error_code], [false, "blocked"]);
  });

  it("keeps known error codes and small evidence only", () => {
    const frame = domResultFrame("r-4", {
      ok: false, error: "no composer", error_code: "teapot",
      evidence: { user_turn_seen: false, submitted: true, page: { html: "<div>" }, note: "x".repeat(65), count: 3 },
    });
    assert.equal(frame.error_code, null);
    assert.deepEqual(frame.evidence, { user_turn_seen: false, submitted: true });
  });
});

describe("isSentToComposer", () => {
  it("is true only for an ok result whose user turn was seen", () => {
    assert.equal(isSentToComposer({ ok: true, evidence: { user_turn_seen: true } }), true);
    for (const result of [{ ok: false, evidence: { user_turn_seen: true } }, { ok: true, evidence: {} }, { ok: true }, null]) {
      assert.equal(isSentToComposer(result), false, JSON.stringify(result));
    }
  });
});

describe("isPosted", () => {
  it("is true only for an ok answer with a 2xx status", () => {
    assert.equal(isPosted({ ok: true, status: 201 }), true);
    for (const result of [{ ok: true, status: 500 }, { ok: false, status: 200 }, { ok: true, status: null }, null]) {
      assert.equal(isPosted(result), false, JSON.stringify(result));
    }
  });
});

describe("socketUrl", () => {
  const cases = [
    ["http://127.0.0.1:8000", "ws://127.0.0.1:8000/ws/plugin/"],
    ["https://conductor.example.org/admin/", "wss://conductor.example.org/ws/plugin/"],
    [" ws://localhost:9000/ws/plugin/ ", "ws://localhost:9000/ws/plugin/"],
    ["ftp://example.org", null],
    ["not a url", null],
    ["", null],
  ];
  for (const [given, expected] of cases) {
    it(`${JSON.stringify(given)} -> ${expected}`, () => assert.equal(socketUrl(given), expected));
  }
});

describe("isLoopback", () => {
  it("knows this machine's names", () => {
    for (const url of ["http://127.0.0.1:8000", "http://localhost:1", "http://[::1]:8000/"]) assert.equal(isLoopback(url), true, url);
    for (const url of ["https://conductor.example.org", "http://10.0.0.2", "nonsense"]) assert.equal(isLoopback(url), false, url);
  });
});

describe("isOverFrameLimit", () => {
  it("counts a frame's UTF-8 bytes, not its characters", () => {
    const frame = (text) => ({ type: "browser.final_message", id: "f", text });
    const overhead = JSON.stringify(frame("")).length;
    assert.equal(isOverFrameLimit(frame("a".repeat(MAX_FRAME_BYTES - overhead))), false);
    assert.equal(isOverFrameLimit(frame("a".repeat(MAX_FRAME_BYTES - overhead + 1))), true);
    assert.equal(isOverFrameLimit(frame("é".repeat(Math.ceil((MAX_FRAME_BYTES - overhead + 1) / 2)))), true);
  });
});
