import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { ADAPTERS, adapterByName, adapterForUrl, registry } from "../adapters/index.js";
import { el, fakeDocument } from "./fake-dom.js";
import { parse } from "./feed.js";

// The server's adapters' `page_values` (automation/platforms/*.py) that a
// page can supply; the rest are left out on purpose (see each adapter).
const SERVER_PAGE_VALUES = {
  claude: ["conversation_uuid", "device_id", "locale", "org_uuid", "parent_message_uuid", "timezone"],
  chatgpt: ["access_token", "account_id", "client_build_number", "client_version", "conduit_token", "conversation_id", "device_id",
    "language", "parent_message_id", "sentinel_chat_requirements_token", "sentinel_prepare_token", "sentinel_proof_token",
    "sentinel_turnstile_token", "session_id", "timezone"],
  gemini: ["at_token", "build_label", "chat_metadata.cid", "chat_metadata.context_token", "chat_metadata.rcid", "chat_metadata.rid",
    "language", "model_header", "session_id"],
};
const TIME_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;

describe("the adapter registry", () => {
  it("registers each platform once, by its SPEC §6 name", () => {
    assert.deepEqual(ADAPTERS.map((adapter) => adapter.name), ["claude", "chatgpt", "gemini"]);
    for (const adapter of ADAPTERS) {
      assert.equal(adapterByName(adapter.name), adapter);
      assert.match(adapter.version, /^\d{4}-\d{2}-\d{2}$/);
      for (const origin of adapter.origins) assert.equal(adapterForUrl(`${origin}/some/page`), adapter);
    }
  });

  it("throws a clear error for an unknown name and refuses a duplicate", () => {
    assert.throws(() => adapterByName("bard"), /unknown platform "bard"; known: chatgpt, claude, gemini/);
    assert.throws(() => registry([ADAPTERS[0], { ...ADAPTERS[0] }]), /"claude" is registered twice/);
  });

  it("finds no adapter for other pages", () => {
    for (const url of ["https://example.com/", "http://claude.ai/chat/x", "https://claude.ai.evil.test/", "not a url"]) {
      assert.equal(adapterForUrl(url), null, url);
    }
  });

  it("gives completion patterns without flags, so their source can cross to the page", () => {
    for (const adapter of ADAPTERS) {
      assert.equal(adapter.completionRequest.method, "POST");
      assert.equal(adapter.completionRequest.pattern.flags, "");
      assert.equal(new RegExp(adapter.completionRequest.pattern.source).source, adapter.completionRequest.pattern.source);
    }
  });
});

describe("completion requests", () => {
  const table = [
    ["claude", "https://claude.ai/api/organizations/o-1/chat_conversations/c-1/completion", true],
    ["claude", "https://claude.ai/api/organizations/o-1/chat_conversations/c-1/retry_completion?x=1", true],
    ["claude", "https://claude.ai/api/organizations/o-1/chat_conversations/c-1", false],
    ["claude", "https://claude.ai/api/organizations/o-1/chat_conversations/c-1/completion/extra", false],
    ["chatgpt", "https://chatgpt.com/backend-api/f/conversation", true],
    ["chatgpt", "https://chatgpt.com/backend-api/conversation", true],
    ["chatgpt", "https://chatgpt.com/backend-anon/f/conversation", true],
    ["chatgpt", "https://chatgpt.com/backend-api/f/conversation/resume", true],
    ["chatgpt", "https://chatgpt.com/backend-api/f/conversation/prepare", false],
    ["chatgpt", "https://chatgpt.com/backend-api/conversation/6750a3b2-9c4d-8000-a1b2-c3d4e5f60718/stream_status", false],
    ["chatgpt", "https://chatgpt.com/backend-api/conversation/6750a3b2-9c4d-8000-a1b2-c3d4e5f60718", false],
    ["gemini", "https://gemini.google.com/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate?bl=x&rt=c", true],
    ["gemini", "https://gemini.google.com/u/1/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate?bl=x", true],
    ["gemini", "https://gemini.google.com/_/BardChatUi/data/batchexecute?rpcids=hNvQHb", false],
  ];
  for (const [platform, url, matches] of table) {
    it(`${platform} ${matches ? "tees" : "ignores"} ${url}`, () => {
      assert.equal(adapterByName(platform).completionRequest.pattern.test(url), matches);
    });
  }
});

describe("conversation URLs", () => {
  const table = [
    ["claude", "https://claude.ai/chat/0F1E2D3C-4b5a-4968-8776-a5b4c3d2e1f0", "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"],
    ["claude", "https://claude.ai/new", null],
    ["claude", "https://chatgpt.com/chat/0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0", null],
    ["chatgpt", "https://chatgpt.com/c/6750a3b2-9c4d-8000-a1b2-c3d4e5f60718", "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718"],
    ["chatgpt", "https://chatgpt.com/g/g-abc-helper/c/6750a3b2-9c4d-8000-a1b2-c3d4e5f60718?model=x", "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718"],
    ["chatgpt", "https://chatgpt.com/", null],
    ["gemini", "https://gemini.google.com/app/4f2a9e7b1c3d5e6f", "c_4f2a9e7b1c3d5e6f"],
    ["gemini", "https://gemini.google.com/u/1/app/4f2a9e7b1c3d5e6f", "c_4f2a9e7b1c3d5e6f"],
    ["gemini", "https://gemini.google.com/app", null],
  ];
  for (const [platform, url, id] of table) {
    it(`${platform}: ${url} -> ${id}`, () => assert.equal(adapterByName(platform).conversationIdFromUrl(url), id));
  }

  it("open the page the delivery names when it shows that conversation, else the conversation's own page", () => {
    const claude = adapterByName("claude");
    const id = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
    assert.equal(claude.conversationUrl({ conversation_id: id, page_url: `https://claude.ai/chat/${id}` }), `https://claude.ai/chat/${id}`);
    assert.equal(claude.conversationUrl({ conversation_id: id, page_url: "https://evil.test/" }), `https://claude.ai/chat/${id}`);
    assert.equal(adapterByName("chatgpt").conversationUrl({ conversation_id: "abc-123456", page_url: "" }), "https://chatgpt.com/c/abc-123456");
    const gemini = adapterByName("gemini");
    assert.equal(gemini.conversationUrl({ conversation_id: "c_4f2a9e7b1c3d5e6f" }), "https://gemini.google.com/app/4f2a9e7b1c3d5e6f");
    assert.equal(
      gemini.conversationUrl({ conversation_id: "c_4f2a9e7b1c3d5e6f", page_url: "https://gemini.google.com/u/1/app/4f2a9e7b1c3d5e6f" }),
      "https://gemini.google.com/u/1/app/4f2a9e7b1c3d5e6f",
    );
    for (const adapter of ADAPTERS) {
      const url = adapter.conversationUrl({ conversation_id: "x/../../y?z" });
      assert.ok(adapter.origins.includes(new URL(url).origin) && !url.includes("/../"), url);
    }
  });
});

/** A `page` (plugin/README.md) over tables, recording the fetches made. */
function fakePage({ url, cookies = {}, globals = {}, json = {} }) {
  const fetched = [];
  return {
    fetched,
    url,
    cookie: async (name) => cookies[name],
    readGlobal: async (path) => {
      if (!Object.hasOwn(globals, path)) throw new Error(`no ${path}`);
      return globals[path];
    },
    fetchJson: async (target, init) => {
      fetched.push({ url: target, headers: init?.headers ?? {} });
      if (!Object.hasOwn(json, target)) throw new Error(`HTTP 404 for ${target}`);
      return json[target];
    },
  };
}

describe("page values", () => {
  const claudeConversation = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
  const claudeTree = `https://claude.ai/api/organizations/org-2/chat_conversations/${claudeConversation}?tree=True&rendering_mode=messages`;

  it("claude: from cookies, the organizations list, the conversation tree, Intl and navigator", async () => {
    const page = fakePage({
      url: `https://claude.ai/chat/${claudeConversation}`,
      cookies: { "anthropic-device-id": "dev-1" },
      globals: { "navigator.language": "fr-FR" },
      json: {
        "https://claude.ai/api/organizations": [{ uuid: "org-1", capabilities: ["api"] }, { uuid: "org-2", capabilities: ["chat", "claude_pro"] }],
        [claudeTree]: { uuid: claudeConversation, current_leaf_message_uuid: "leaf-1" },
      },
    });
    assert.deepEqual(await adapterByName("claude").readPageValues(SERVER_PAGE_VALUES.claude, page), {
      conversation_uuid: claudeConversation,
      device_id: "dev-1",
      locale: "fr-FR",
      org_uuid: "org-2",
      parent_message_uuid: "leaf-1",
      timezone: TIME_ZONE,
    });
    assert.equal(page.fetched.filter((fetch) => fetch.url.endsWith("/api/organizations")).length, 1, "the org is looked up once");
  });

  it("claude: the lastActiveOrg cookie first, and only the names asked for", async () => {
    const page = fakePage({ url: "https://claude.ai/new", cookies: { lastActiveOrg: "org-9" } });
    assert.deepEqual(await adapterByName("claude").readPageValues(["org_uuid", "parent_message_uuid"], page), { org_uuid: "org-9" });
    assert.deepEqual(page.fetched, []);
  });

  it("chatgpt: the token from the session, the leaf with it, the device cookie; no sentinel or conduit tokens", async () => {
    const conversation = "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718";
    const page = fakePage({
      url: `https://chatgpt.com/c/${conversation}`,
      cookies: { "oai-did": "did-1" },
      globals: { "navigator.language": "en-GB" },
      json: {
        "https://chatgpt.com/api/auth/session": { accessToken: "jwt-1", expires: "2026-12-01" },
        [`https://chatgpt.com/backend-api/conversation/${conversation}`]: { current_node: "node-7", mapping: {} },
      },
    });
    assert.deepEqual(await adapterByName("chatgpt").readPageValues(SERVER_PAGE_VALUES.chatgpt, page), {
      access_token: "jwt-1",
      conversation_id: conversation,
      device_id: "did-1",
      language: "en-GB",
      parent_message_id: "node-7",
      timezone: TIME_ZONE,
    });
    const leafFetch = page.fetched.find((fetch) => fetch.url.includes("/backend-api/conversation/"));
    assert.equal(leafFetch.headers.Authorization, "Bearer jwt-1");
  });

  it("gemini: WIZ_global_data, and the chat metadata of the last stream this page finished", async () => {
    const expected = JSON.parse(readFileSync(new URL("./fixtures/gemini/answer_with_baa_and_emoji.expected.json", import.meta.url), "utf8"));
    const bytes = readFileSync(new URL("./fixtures/gemini/answer_with_baa_and_emoji.stream", import.meta.url));
    const gemini = adapterByName("gemini");
    const page = fakePage({
      url: "https://gemini.google.com/app/4f2a9e7b1c3d5e6f",
      globals: { "WIZ_global_data.SNlM0e": "at-1", "WIZ_global_data.cfb2h": "boq_x", "WIZ_global_data.FdrFJe": "-42", "WIZ_global_data.TuX5cc": "en" },
    });
    const before = await gemini.readPageValues(SERVER_PAGE_VALUES.gemini, page);
    assert.deepEqual(before, { at_token: "at-1", build_label: "boq_x", session_id: "-42", language: "en" });
    assert.notEqual(parse(gemini, expected.request, bytes, 5), null);
    assert.deepEqual(await gemini.readPageValues(SERVER_PAGE_VALUES.gemini, page), {
      ...before,
      "chat_metadata.cid": "c_4f2a9e7b1c3d5e6f",
      "chat_metadata.rid": "r_1a2b3c4d5e6f7a8b",
      "chat_metadata.rcid": "rc_9f8e7d6c5b4a3f2e",
      "chat_metadata.context_token": "!SyntheticContextToken_AbC123-xyz",
    });
  });

  it("gemini: the context token from the sparse key \"26\", and none after a turn that had none", async () => {
    const gemini = adapterByName("gemini");
    const page = fakePage({ url: "https://gemini.google.com/app/4f2a9e7b1c3d5e6f" });
    const streamOf = (name) => [
      JSON.parse(readFileSync(new URL(`./fixtures/gemini/${name}.expected.json`, import.meta.url), "utf8")).request,
      readFileSync(new URL(`./fixtures/gemini/${name}.stream`, import.meta.url)),
    ];
    assert.notEqual(parse(gemini, ...streamOf("context_token_as_sparse_key"), 3), null);
    assert.deepEqual(await gemini.readPageValues(["chat_metadata.rid", "chat_metadata.context_token"], page), {
      "chat_metadata.rid": "r_2b3c4d5e6f7a8b9c",
      "chat_metadata.context_token": "!SparseContextToken_Zy98-x",
    });
    assert.notEqual(parse(gemini, ...streamOf("first_turn_1096_trailer_no_token"), 3), null);
    assert.deepEqual(await gemini.readPageValues(["chat_metadata.rid", "chat_metadata.context_token"], page), {
      "chat_metadata.rid": "r_2b3c4d5e6f7a8b9c",
    });
  });

  it("leave out what the page does not have, and never throw", async () => {
    const broken = {
      url: "https://claude.ai/new",
      cookie: () => {
        throw new Error("no cookies");
      },
      readGlobal: async () => ({ not: "a string" }),
      fetchJson: async () => {
        throw new Error("offline");
      },
    };
    for (const adapter of ADAPTERS) {
      const values = await adapter.readPageValues([...SERVER_PAGE_VALUES[adapter.name], "unknown_name"], { ...broken, url: adapter.origins[0] });
      for (const [name, value] of Object.entries(values)) {
        assert.equal(name, "timezone", `${adapter.name} ${name}`);
        assert.equal(value, TIME_ZONE);
      }
    }
  });
});

describe("DOM helpers", () => {
  // Each case builds a page and says what the adapter must read from it.
  const cases = [
    ["claude: streaming flag, the newest response's content, no message id", "claude", () => {
      const newer = el("div", { class: "font-claude-response" }, "new");
      const older = el("div", { class: "font-claude-response" }, "old");
      const document = fakeDocument({ '[data-is-streaming="true"]': [el("div")], "[data-is-streaming] .font-claude-response": [older, newer] });
      return { document, generating: true, answer: newer, messageId: null };
    }],
    ["claude: falls back to the older class name", "claude", () => {
      const older = el("div", { class: "font-claude-message" }, "old");
      return { document: fakeDocument({ ".font-claude-message": [older] }), generating: false, answer: older, messageId: null };
    }],
    ["chatgpt: the stop button, the newest assistant turn's Markdown and its message id", "chatgpt", () => {
      const markdown = el("div", { class: "markdown prose" }, el("p", {}, "hi"));
      const turn = el("div", { "data-message-author-role": "assistant", "data-message-id": "msg-2" }, markdown);
      const document = fakeDocument({
        'button[data-testid="stop-button"]': [],
        '[data-message-author-role="assistant"]': [el("div"), turn],
        ".markdown": [markdown],
        "[data-message-id]": [turn],
      });
      return { document, generating: false, answer: markdown, messageId: "msg-2" };
    }],
    ["gemini: the stop icon, the newest model response's content and its rid", "gemini", () => {
      const content = el("div", { class: "markdown" }, "hi");
      const holder = el("message-content", { id: "message-content-id-r_1a2b" }, content);
      const document = fakeDocument({
        'mat-icon[data-mat-icon-name="stop"]': [el("mat-icon")],
        "model-response message-content .markdown": [content],
        '[id^="message-content-id-"]': [holder],
      });
      return { document, generating: true, answer: content, messageId: "r_1a2b" };
    }],
  ];
  for (const [name, platform, page] of cases) {
    it(name, () => {
      const { document, generating, answer, messageId } = page();
      const { dom } = adapterByName(platform);
      assert.equal(dom.isGenerating(document), generating);
      assert.equal(dom.lastAssistantMessage(document), answer);
      assert.equal(dom.messageId(answer), messageId);
    });
  }

  it("find no answer on a page without one", () => {
    for (const adapter of ADAPTERS) assert.equal(adapter.dom.lastAssistantMessage(fakeDocument({})), null, adapter.name);
  });
});

describe("claude stream ids", () => {
  it("fall back to the ids the page chose in turn_message_uuids when message_start names none", () => {
    const parser = adapterByName("claude").createStreamParser({
      requestUrl: "https://claude.ai/api/organizations/org-1/chat_conversations/conv-1/completion",
      requestBody: JSON.stringify({ parent_message_uuid: "older", turn_message_uuids: { human_message_uuid: "human-1", assistant_message_uuid: "assistant-1" } }),
    });
    parser.feed('data: {"type":"message_start","message":{}}\n\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"ok"}}\n\n');
    parser.feed('data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}\n\ndata: {"type":"message_stop"}\n\n');
    assert.deepEqual(parser.finish(), { conversation_id: "conv-1", message_id: "assistant-1", parent_message_id: "human-1", organization_id: "org-1", text: "ok" });
  });
});

describe("readable text", () => {
  // [platform, the text as streamed or shown, what Conductor gets]
  const table = [
    ["chatgpt", "plain text, ```baa\necho\n{}\n```", "plain text, ```baa\necho\n{}\n```"],
    ["chatgpt", "Paris\uE200cite\uE202turn0search0\uE201 is big.", "Paris is big."],
    ["chatgpt", "A\uE200cite\uE202turn0search0\uE202turn1news2\uE201B\uE200cite\uE202turn2view0\uE201C", "ABC"],
    ["chatgpt", "Ask \uE200entity\uE202[\"people\",\"Ada Lovelace\"]\uE201.", "Ask Ada Lovelace."],
    ["chatgpt", "Ask \uE200entity\uE202not json\uE201.", "Ask ."],
    ["chatgpt", "cut \uE200cite\uE202turn0", "cut citeturn0"],
    ["chatgpt", "stray\uE203\uE204\uE206 markers", "stray markers"],
    ["gemini", "Look:\nhttp://googleusercontent.com/image_generation_content/0\n\nDone.", "Look:\nDone."],
    ["gemini", "http://googleusercontent.com/youtube_content/12 text", " text"],
    ["gemini", "https://example.org/googleusercontent.com/x stays", "https://example.org/googleusercontent.com/x stays"],
    ["gemini", 'Done.\n\n<FollowUp label="More" query="Tell me more"/>', "Done."],
    ["gemini", "A\n<FollowUp label=\"x\" query=\"a > b\"/> <FollowUp label='z' query=\"w\"/>\n", "A"],
    ["gemini", "Write `<FollowUp/>` tags.", "Write `<FollowUp/>` tags."],
    ["gemini", 'Cut <FollowUp label="x"', 'Cut <FollowUp label="x"'],
  ];
  for (const [platform, input, output] of table) {
    it(`${platform}: ${JSON.stringify(input)}`, () => {
      assert.equal(adapterByName(platform).readableText(input), output);
    });
  }

  it("is not needed for claude, whose text has no markers", () => {
    assert.equal(adapterByName("claude").readableText, undefined);
  });
});

describe("chatgpt v1 operations", () => {
  const request = {
    requestUrl: "https://chatgpt.com/backend-api/f/conversation",
    requestBody: JSON.stringify({ messages: [{ id: "u-1" }], conversation_id: "c-1" }),
  };
  const add = (status) => ({ p: "", o: "add", v: { message: { id: "a-1", author: { role: "assistant" }, content: { content_type: "text", parts: [""] }, status, metadata: { parent_id: "u-1" }, channel: "final" }, conversation_id: "c-1" } });
  const finish = { p: "", o: "patch", v: [{ p: "/message/status", o: "replace", v: "finished_successfully" }] };
  // [what it shows, the ops after the answer's add, the text read]
  const table = [
    ["a bare string repeats the last top-level path", [{ p: "/message/content/parts/0", o: "append", v: "a" }, { v: "b" }], "ab"],
    ["a patch's inner ops do not change what a bare string repeats",
      [{ p: "/message/content/parts/0", o: "append", v: "a" }, { p: "", o: "patch", v: [{ p: "/message/metadata/x", o: "replace", v: 1 }] }, { v: "b" }], "ab"],
    ["a bare list after a patch is a patch", [{ p: "", o: "patch", v: [{ p: "/message/content/parts/0", o: "append", v: "a" }] }, { v: [{ p: "/message/content/parts/0", o: "append", v: "b" }] }], "ab"],
    ["a bare string right after the add is text", [{ v: "a" }, { v: "b" }], "ab"],
    ["a bare list of operations after an append is a patch at the root",
      [{ p: "/message/content/parts/0", o: "append", v: "a" }, { v: [{ p: "/message/content/parts/0", o: "append", v: "b" }] }], "ab"],
    ["a patch's operations are relative to its own path",
      [{ p: "/message/content", o: "patch", v: [{ p: "/parts/0", o: "append", v: "a" }] }], "a"],
    ["a bare list after a patch with a path of its own is relative to that path",
      [{ p: "/message/content", o: "patch", v: [{ p: "/parts/0", o: "append", v: "a" }] }, { v: [{ p: "/parts/0", o: "append", v: "b" }] }], "ab"],
    ["a patch inside a patch nests its path",
      [{ p: "", o: "patch", v: [{ p: "/message", o: "patch", v: [{ p: "/content/parts/0", o: "append", v: "a" }] }] }], "a"],
  ];
  for (const [name, ops, expected] of table) {
    it(name, () => {
      const parser = adapterByName("chatgpt").createStreamParser(request);
      for (const op of [add("in_progress"), ...ops, finish]) parser.feed(`data: ${JSON.stringify(op)}\n\n`);
      parser.feed("data: [DONE]\n\n");
      assert.equal(parser.finish()?.text, expected);
    });
  }

  it("takes a message added already finished as the answer only when it belongs to the new turn", () => {
    const echoed = adapterByName("chatgpt").createStreamParser(request);
    const earlier = add("finished_successfully");
    earlier.v.message.metadata.parent_id = "older";
    echoed.feed(`data: ${JSON.stringify(earlier)}\n\ndata: [DONE]\n\n`);
    assert.equal(echoed.finish(), null);
    const short = adapterByName("chatgpt").createStreamParser(request);
    short.feed(`data: ${JSON.stringify(add("finished_successfully"))}\n\ndata: {"type": "message_stream_complete"}\n\n`);
    assert.equal(short.finish()?.message_id, "a-1");
  });
});
