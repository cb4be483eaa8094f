// The tool guide's pure parts (lib/guide.js): the guide.get frame, what its
// answer holds, and when the "new conversation" option inserts the guide.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ServerRefused } from "../lib/answers.js";
import { GuideRefused, guideFromAnswer, guideGetFrame, guideOutcomeText, NewChatGuide } from "../lib/guide.js";

describe("guideGetFrame", () => {
  it("names the platform and the conversation", () => {
    assert.deepEqual(guideGetFrame({ id: "q1", platform: "claude", conversationId: "abc" }), {
      type: "guide.get", id: "q1", platform: "claude", conversation_id: "abc",
    });
  });
  for (const missing of [null, undefined, ""]) {
    it(`sends null for a new chat (${JSON.stringify(missing)})`, () => {
      assert.equal(guideGetFrame({ id: "q1", platform: "chatgpt", conversationId: missing }).conversation_id, null);
    });
  }
});

describe("guideFromAnswer", () => {
  it("takes the version and text of a guide frame", () => {
    assert.deepEqual(guideFromAnswer({ type: "guide", id: "q", version: "v1", text: "Use ```baa blocks." }), { version: "v1", text: "Use ```baa blocks." });
  });
  it("turns an error frame into GuideRefused with its code and detail", () => {
    assert.throws(() => guideFromAnswer({ type: "error", id: "q", code: "invalid", detail: "unknown platform" }), (error) => {
      assert.ok(error instanceof GuideRefused);
      assert.ok(error instanceof ServerRefused);
      assert.equal(error.code, "invalid");
      assert.equal(error.message, "the server refused: unknown platform (invalid)");
      return true;
    });
  });
  const broken = [
    ["no text", { type: "guide", id: "q", version: "v1" }],
    ["an empty text", { type: "guide", id: "q", version: "v1", text: "  " }],
    ["no version", { type: "guide", id: "q", text: "t" }],
    ["another frame type", { type: "ack", id: "q" }],
  ];
  for (const [name, frame] of broken) {
    it(`refuses ${name}`, () => assert.throws(() => guideFromAnswer(frame), GuideRefused));
  }
});

describe("guideOutcomeText", () => {
  const cases = [
    [{ ok: true, version: "a1b2c3", already_filled: false }, "Tool guide a1b2c3 inserted: read it and send it."],
    [{ ok: true, version: "a1b2c3", already_filled: true }, "Tool guide a1b2c3 is in the composer already: read it and send it."],
    [{ ok: false, error: "not connected to the Conductor server (paused)" }, "The tool guide was not inserted: not connected to the Conductor server (paused)."],
    [null, "The tool guide was not inserted: the extension did not answer."],
    [{ ok: false, error: "the server refused: no such platform. (invalid)." }, "The tool guide was not inserted: the server refused: no such platform. (invalid)."],
  ];
  for (const [outcome, expected] of cases) {
    it(expected, () => assert.equal(guideOutcomeText(outcome), expected));
  }
});

describe("NewChatGuide.shouldInsert", () => {
  const NEW = { url: "https://claude.ai/new", conversationId: null };
  const CHAT = { url: "https://claude.ai/chat/3f1e2d4c-5b6a-4978-8c9d-0a1b2c3d4e5f", conversationId: "3f1e2d4c-5b6a-4978-8c9d-0a1b2c3d4e5f" };

  /** Runs the page's URL checks in order and returns the answers. */
  const run = (isEnabled, ...pages) => {
    const guide = new NewChatGuide();
    return pages.map((page) => guide.shouldInsert({ isEnabled, ...page }));
  };

  const cases = [
    ["a new chat opened", true, [NEW], [true]],
    ["the option off", false, [NEW, CHAT, NEW], [false, false, false]],
    ["an existing conversation opened", true, [CHAT], [false]],
    ["the same new chat checked again (the composer emptied by the person)", true, [NEW, NEW, NEW], [true, false, false]],
    ["only the fragment changed", true, [NEW, { ...NEW, url: `${NEW.url}#x` }], [true, false]],
    ["the new chat became a conversation (its first message sent)", true, [NEW, CHAT, CHAT], [true, false, false]],
    ["'New chat' after a conversation", true, [CHAT, NEW, CHAT, NEW], [false, true, false, true]],
    ["from one new-chat page to another", true, [NEW, { url: "https://claude.ai/project/p1", conversationId: null }], [true, true]],
  ];
  for (const [name, isEnabled, pages, expected] of cases) {
    it(name, () => assert.deepEqual(run(isEnabled, ...pages), expected));
  }
});
