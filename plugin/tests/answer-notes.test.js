// The side panel's notes on withdrawn answers (lib/answer-notes.js).

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { answerNoteOf, MAX_NOTES, noteFor, noteText, withNote } from "../lib/answer-notes.js";

const CHATGPT = { platform: "chatgpt", conversation_id: "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718", reason: "moderation_blocked" };

describe("answerNoteOf", () => {
  it("takes a withdrawn answer's reason with its conversation", () => {
    assert.deepEqual(answerNoteOf(CHATGPT, 5), { ...CHATGPT, at: 5 });
    assert.deepEqual(answerNoteOf({ ...CHATGPT, platform: "claude", reason: "refused" }, 5)?.reason, "refused");
  });

  it("refuses other reasons, and messages without a conversation or platform", () => {
    for (const message of [
      { ...CHATGPT, reason: "max_tokens" },
      { ...CHATGPT, reason: "error_1037" },
      { ...CHATGPT, reason: "the chat's text" },
      { ...CHATGPT, conversation_id: "" },
      { ...CHATGPT, conversation_id: "x".repeat(201) },
      { ...CHATGPT, platform: 7 },
      {},
    ]) {
      assert.equal(answerNoteOf(message, 5), null, JSON.stringify(message));
    }
  });
});

describe("withNote and noteFor", () => {
  it("keep the latest note of each conversation, the newest few, and find a conversation's", () => {
    let notes = withNote(undefined, answerNoteOf(CHATGPT, 1));
    notes = withNote(notes, answerNoteOf({ ...CHATGPT, conversation_id: "other" }, 2));
    notes = withNote(notes, answerNoteOf(CHATGPT, 3));
    assert.deepEqual(notes.map((note) => [note.conversation_id, note.at]), [["other", 2], [CHATGPT.conversation_id, 3]]);
    assert.equal(noteFor(notes, "chatgpt", CHATGPT.conversation_id).at, 3);
    assert.equal(noteFor(notes, "claude", CHATGPT.conversation_id), null);
    assert.equal(noteFor(notes, "chatgpt", null), null);
    for (let n = 0; n < 50; n++) notes = withNote(notes, answerNoteOf({ ...CHATGPT, conversation_id: `c-${n}` }, 10 + n));
    assert.equal(notes.length, MAX_NOTES);
    assert.equal(notes.at(-1).conversation_id, "c-49");
  });

  it("ignore what storage held that is not a note", () => {
    const stored = [null, "text", { ...CHATGPT, at: "soon" }, { ...CHATGPT, reason: "max_tokens", at: 1 }, { ...CHATGPT, at: 4 }];
    assert.deepEqual(noteFor(stored, "chatgpt", CHATGPT.conversation_id), { ...CHATGPT, at: 4 });
    assert.deepEqual(noteFor({ not: "a list" }, "chatgpt", CHATGPT.conversation_id), null);
  });
});

describe("noteText", () => {
  it("says when, why, and that none of its blocks runs", () => {
    assert.equal(
      noteText(answerNoteOf(CHATGPT, 1), "10:32"),
      "An answer here (10:32) was not sent to Conductor: ChatGPT's moderation withdrew the answer after it was written. None of its blocks runs.",
    );
    assert.match(noteText(answerNoteOf({ ...CHATGPT, platform: "claude", reason: "refused" }, 1), "09:05"), /Claude refused to go on/);
  });
});
