import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { anyMatches, conversationUrlFor, once, pathMatch, queryAllFirst, queryLast, quietly, readValues } from "../lib/page-helpers.js";
import { el, fakeDocument } from "./fake-dom.js";

describe("conversation URLs", () => {
  it("matches a path on its own origin only", () => {
    assert.equal(pathMatch("https://claude.ai/chat/abc", "https://claude.ai", /^\/chat\/([a-z]+)$/)[1], "abc");
    assert.equal(pathMatch("https://evil.example/chat/abc", "https://claude.ai", /^\/chat\/([a-z]+)$/), null);
    assert.equal(pathMatch("not a url", "https://claude.ai", /.*/), null);
  });

  it("keeps the page the delivery names when it shows the conversation", () => {
    const idOf = (url) => pathMatch(url, "https://chatgpt.com", /\/c\/([a-z0-9]+)$/)?.[1] ?? null;
    const urlFor = conversationUrlFor(idOf, (id) => `https://chatgpt.com/c/${id}`);
    assert.equal(urlFor({ conversation_id: "c1", page_url: "https://chatgpt.com/g/gpt/c/c1" }), "https://chatgpt.com/g/gpt/c/c1");
    assert.equal(urlFor({ conversation_id: "c1", page_url: "https://chatgpt.com/g/gpt/c/c2" }), "https://chatgpt.com/c/c1");
    assert.equal(urlFor({ conversation_id: "c1" }), "https://chatgpt.com/c/c1");
  });
});

describe("selector look-ups", () => {
  it("takes the first selector that matches, the later ones as fallbacks", () => {
    const [a, b, c] = [el("div"), el("div"), el("div")];
    const document = fakeDocument({ ".new": [], ".old": [a, b], ".older": [c] });
    assert.deepEqual(queryAllFirst(document, [".new", ".old", ".older"]), [a, b]);
    assert.equal(queryLast(document, [".new", ".old"]), b);
    assert.equal(queryLast(document, [".new"]), null);
    assert.equal(anyMatches(document, [".new", ".older"]), true);
    assert.equal(anyMatches(document, [".new"]), false);
  });
});

describe("page values", () => {
  it("leaves out what a reader cannot give: a throw, a rejection, a non-string, an empty value, no reader", async () => {
    const values = await readValues(["a", "b", "c", "d", "e", "f", "a"], {
      a: async () => "A",
      b: () => {
        throw new Error("no");
      },
      c: async () => Promise.reject(new Error("no")),
      d: async () => 42,
      e: async () => "",
    });
    assert.deepEqual(values, { a: "A" });
    assert.equal(await quietly(() => null), "");
  });

  it("reads a shared look-up once per call", async () => {
    let calls = 0;
    const org = once(async () => {
      calls++;
      return "org-1";
    });
    assert.deepEqual(await readValues(["x", "y"], { x: org, y: async () => `parent of ${await org()}` }), { x: "org-1", y: "parent of org-1" });
    assert.equal(calls, 1);
  });
});
