// What a delivery may do (lib/delivery-rules.js and each adapter's
// `deliveryRequests`): the requests the server builds pass, forged ones are
// refused. fixtures/delivery-requests.json is written from platforms/ by
// tests/platforms/plugin_requests.py, and tests/platforms/test_plugin_requests.py
// checks it is what the server builds today.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { ADAPTERS, adapterByName } from "../adapters/index.js";
import { deliveryRequestRefusal, frameRefusal, MAX_URL_CHARS, tabRefusal } from "../lib/delivery-rules.js";
import { fillPageValues, placeholderNames } from "../lib/placeholders.js";

const BUILT = JSON.parse(readFileSync(new URL("./fixtures/delivery-requests.json", import.meta.url), "utf8")).frames;
/** Page values the page gives for its own conversation. */
const CONVERSATION_VALUES = ["conversation_uuid", "conversation_id", "chat_metadata.cid"];
/** What a page may put in any other value: it must not move the request. */
const HOSTILE_VALUE = "../../settings?x=1#/../y";

function built(platform, name = "ids_known-0") {
  const frame = BUILT.find((candidate) => candidate.name === `${platform}-${name}`);
  assert.ok(frame, `no built frame ${platform}-${name}`);
  return structuredClone(frame);
}

function proxyFrame(frame) {
  return { type: "browser.proxy_delivery", ...frame };
}

/** The request as the page sends it: each value filled in as content/main.js does. */
function filled(frame) {
  const values = Object.fromEntries(
    placeholderNames(frame.request).map((name) => [name, CONVERSATION_VALUES.includes(name) ? frame.conversation_id : HOSTILE_VALUE]),
  );
  return fillPageValues(frame.request, values);
}

function refusalOf(frame, request = frame.request) {
  return deliveryRequestRefusal(adapterByName(frame.platform), request, frame.conversation_id);
}

describe("the requests the server builds", () => {
  it("covers every platform", () => {
    assert.deepEqual([...new Set(BUILT.map((frame) => frame.platform))].sort(), ADAPTERS.map((adapter) => adapter.name).sort());
  });

  for (const frame of BUILT) {
    it(`allows ${frame.name}, as sent and as filled in by the page`, () => {
      assert.equal(frameRefusal(adapterByName(frame.platform), proxyFrame(frame)), null);
      assert.equal(refusalOf(frame, filled(frame)), null);
    });
  }
});

describe("forged proxy deliveries", () => {
  /** Each: a change to a built frame, and the check that refuses it. */
  const FORGERIES = [
    ["a DELETE of the conversation", "claude", (frame) => (frame.request.method = "DELETE"), "refused_method"],
    ["a GET", "chatgpt", (frame) => (frame.request.method = "GET"), "refused_method"],
    ["a lower-case method", "claude", (frame) => (frame.request.method = "post"), "refused_method"],
    ["no method", "gemini", (frame) => delete frame.request.method, "refused_method"],
    ["another origin", "claude", (frame) => (frame.request.url = frame.request.url.replace("https://claude.ai", "https://evil.example")), "refused_origin"],
    ["another platform's origin", "chatgpt", (frame) => (frame.request.url = "https://claude.ai/backend-api/f/conversation"), "refused_origin"],
    ["plain http", "claude", (frame) => (frame.request.url = frame.request.url.replace("https:", "http:")), "refused_origin"],
    ["credentials in the URL", "chatgpt", (frame) => (frame.request.url = "https://user:pw@chatgpt.com/backend-api/f/conversation"), "refused_origin"],
    ["a subdomain", "gemini", (frame) => (frame.request.url = frame.request.url.replace("gemini.google.com", "accounts.gemini.google.com")), "refused_origin"],
    ["the account settings", "chatgpt", (frame) => (frame.request.url = "https://chatgpt.com/backend-api/settings/account"), "refused_path"],
    ["a conversation's deletion path", "chatgpt", (frame) => (frame.request.url = "https://chatgpt.com/backend-api/conversation/6750a3b2-9c4d-8000-a1b2-c3d4e5f60718"), "refused_path"],
    ["a path walking out with ..", "claude", (frame) => (frame.request.url += "/../../../../api/account"), "refused_path"],
    ["the retry endpoint", "claude", (frame) => (frame.request.url = frame.request.url.replace("/completion", "/retry_completion")), "refused_path"],
    ["another RPC of Gemini's", "gemini", (frame) => (frame.request.url = frame.request.url.replace("StreamGenerate", "DeleteConversation")), "refused_path"],
    ["a query on a path that has none", "claude", (frame) => (frame.request.url += "?tree=True"), "refused_query"],
    ["an unknown query key", "gemini", (frame) => (frame.request.url += "&rpcids=GzXR5e"), "refused_query"],
    ["a query key twice", "gemini", (frame) => (frame.request.url += "&rt=b"), "refused_query"],
    ["a header of its own", "claude", (frame) => (frame.request.headers["X-HTTP-Method-Override"] = "DELETE"), "refused_header"],
    ["another platform's header", "claude", (frame) => (frame.request.headers.Authorization = "Bearer {{page:access_token}}"), "refused_header"],
    ["a header that is not text", "chatgpt", (frame) => (frame.request.headers.Accept = 42), "refused_header"],
    ["headers that are not an object", "chatgpt", (frame) => (frame.request.headers = ["Accept"]), "refused_request"],
    ["another conversation in the path", "claude", (frame) => (frame.request.url = frame.request.url.replace(frame.conversation_id, "00000000-0000-4000-8000-000000000000")), "refused_conversation"],
    ["the page's conversation instead of the named one", "claude", (frame) => (frame.request.url = frame.request.url.replace(frame.conversation_id, "{{page:conversation_uuid}}")), "refused_conversation"],
    ["another conversation in the body", "chatgpt", (frame) => (frame.request.body = frame.request.body.replace(frame.conversation_id, "00000000-0000-4000-8000-000000000000")), "refused_conversation"],
    ["a new conversation (no conversation in the body)", "chatgpt", (frame) => (frame.request.body = JSON.stringify({ ...JSON.parse(frame.request.body), conversation_id: undefined })), "refused_conversation"],
    ["a body that is not JSON", "chatgpt", (frame) => (frame.request.body = "prompt=hi"), "refused_conversation"],
    ["another conversation in Gemini's chat metadata", "gemini", (frame) => (frame.request.body = frame.request.body.replace("c_4f2a9e7b1c3d5e6f", "c_0000000000000000")), "refused_conversation"],
    ["Gemini's form without f.req", "gemini", (frame) => (frame.request.body = "at={{page:at_token}}"), "refused_conversation"],
    ["a frame for another conversation than its request", "claude", (frame) => (frame.conversation_id = "00000000-0000-4000-8000-000000000000"), "refused_conversation"],
    ["no URL", "claude", (frame) => delete frame.request.url, "refused_request"],
    ["a URL that does not parse", "claude", (frame) => (frame.request.url = "https://claude.ai:99999/"), "refused_request"],
    ["a URL too long to read", "gemini", (frame) => (frame.request.url += "x".repeat(MAX_URL_CHARS)), "refused_request"],
    ["a body that is not text", "chatgpt", (frame) => (frame.request.body = { conversation_id: frame.conversation_id }), "refused_request"],
  ];

  for (const [what, platform, forge, reason] of FORGERIES) {
    it(`refuses ${what} (${reason})`, () => {
      const frame = built(platform);
      forge(frame);
      const refusal = refusalOf(frame);
      assert.equal(refusal?.reason, reason, JSON.stringify(refusal));
      assert.match(refusal.error, /^the plugin refused this delivery: /);
    });
  }

  it("refuses a frame that is not a request at all", () => {
    for (const request of [undefined, null, "DELETE /", [], 42]) {
      assert.equal(deliveryRequestRefusal(adapterByName("claude"), request, "7c1f0e3a-1d2b-4c5e-9f80-123456789abc")?.reason, "refused_request");
    }
  });

  it("refuses a frame that names no conversation, whatever its request", () => {
    for (const conversationId of [undefined, null, "", 42]) {
      const frame = { ...built("chatgpt"), conversation_id: conversationId };
      assert.equal(frameRefusal(adapterByName("chatgpt"), proxyFrame(frame))?.reason, "refused_conversation");
    }
  });

  it("refuses a conversation id whose page is not that conversation's", () => {
    // The tab opened for it would show something else (a new chat, a settings page).
    for (const [platform, conversationId] of [["claude", "../settings"], ["chatgpt", "x"], ["gemini", "4f2a9e7b1c3d5e6f"]]) {
      const frame = { ...built(platform), conversation_id: conversationId };
      assert.equal(frameRefusal(adapterByName(platform), proxyFrame(frame))?.reason, "refused_tab", platform);
    }
  });

  it("is refused after the page values are filled in when a value changes the conversation", () => {
    const frame = built("chatgpt", "parent_unknown-0");
    frame.request.body = frame.request.body.replace(`"${frame.conversation_id}"`, '"{{page:conversation_id}}"');
    const request = fillPageValues(frame.request, Object.fromEntries(placeholderNames(frame.request).map((name) => [name, "another-conversation"])));
    assert.equal(refusalOf(frame, request)?.reason, "refused_conversation");
  });
});

describe("DOM deliveries and the tab", () => {
  const claude = adapterByName("claude");
  const id = "7c1f0e3a-1d2b-4c5e-9f80-123456789abc";

  it("go into a tab of the named conversation only", () => {
    assert.equal(tabRefusal(claude, id, `https://claude.ai/chat/${id}`), null);
    assert.equal(tabRefusal(claude, id, "https://claude.ai/chat/00000000-0000-4000-8000-000000000000")?.reason, "refused_tab");
    assert.equal(tabRefusal(claude, id, "https://claude.ai/new")?.reason, "refused_tab");
    assert.equal(tabRefusal(claude, "", "https://claude.ai/new")?.reason, "refused_conversation");
  });

  it("are refused before a tab is opened when the page for the id is not that conversation's", () => {
    const dom = { type: "browser.dom_delivery", platform: "claude", text: "hi" };
    assert.equal(frameRefusal(claude, { ...dom, conversation_id: id }), null);
    // A page_url of another conversation is not opened: the conversation's own page is.
    assert.equal(frameRefusal(claude, { ...dom, conversation_id: id, page_url: "https://claude.ai/chat/00000000-0000-4000-8000-000000000000" }), null);
    assert.equal(frameRefusal(claude, { ...dom, conversation_id: "" })?.reason, "refused_conversation");
    assert.equal(frameRefusal(claude, { ...dom, conversation_id: "new" })?.reason, "refused_tab");
    assert.equal(frameRefusal(adapterByName("gemini"), { ...dom, conversation_id: "c_4f2a9e7b1c3d5e6f", page_url: "https://gemini.google.com/u/1/app/4f2a9e7b1c3d5e6f" }), null);
  });
});

describe("every adapter declares its delivery requests", () => {
  for (const adapter of ADAPTERS) {
    it(`${adapter.name}: methods, paths, lower-case header names and a conversation`, () => {
      assert.ok(adapter.deliveryRequests.length > 0);
      for (const rule of adapter.deliveryRequests) {
        assert.match(rule.method, /^[A-Z]+$/);
        assert.ok(rule.path instanceof RegExp && rule.path.source.startsWith("^") && rule.path.source.endsWith("$"));
        for (const name of rule.headers) assert.equal(name, name.toLowerCase());
        assert.equal(typeof rule.conversationOf, "function");
      }
    });
  }
});
