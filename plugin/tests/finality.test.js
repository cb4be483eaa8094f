// The one rule of what is final (lib/finality.js): every reason an adapter
// or the tracker gives is named, with a verdict, and only a stopped, cut or
// withdrawn answer holds the page back.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { ERROR_TYPES } from "../adapters/claude/stream.js";
import { holdsPageBack, isReason, REASONS, saysOf, VERDICTS, verdictOf } from "../lib/finality.js";
import { StreamState } from "../lib/stream-readers.js";

const FIXTURES = new URL("./fixtures/", import.meta.url);

/** Every `incomplete` a recorded-shape fixture expects. */
function fixtureReasons() {
  const reasons = [];
  for (const platform of ["claude", "chatgpt", "gemini"]) {
    const folder = new URL(`${platform}/`, FIXTURES);
    for (const file of readdirSync(folder).filter((name) => name.endsWith(".expected.json"))) {
      const { incomplete } = JSON.parse(readFileSync(new URL(file, folder), "utf8"));
      if (incomplete) reasons.push(incomplete);
    }
  }
  return reasons;
}

describe("the reasons", () => {
  it("each have a verdict and say something to a person", () => {
    for (const [reason, { verdict, says }] of Object.entries(REASONS)) {
      assert.ok(Object.values(VERDICTS).includes(verdict), reason);
      assert.ok(says.length > 10, reason);
      assert.equal(saysOf(reason), says);
    }
  });

  it("name every reason a fixture expects, and every error type Claude's adapter knows", () => {
    for (const reason of [...fixtureReasons(), ...ERROR_TYPES]) assert.ok(isReason(reason), reason);
    for (const type of ERROR_TYPES) assert.equal(verdictOf(type), VERDICTS.STOPPED, type);
  });

  it("take Gemini's codes as stopped answers, and nothing else as a reason", () => {
    assert.equal(verdictOf("error_1037"), VERDICTS.STOPPED);
    assert.equal(verdictOf("error_1096"), VERDICTS.STOPPED);
    assert.match(saysOf("error_1097"), /error code 1097/);
    for (const other of ["", "error_", "error_12x", "error_1234567", "__proto__", "toString", null, 7]) {
      assert.equal(isReason(other), false, String(other));
      assert.equal(verdictOf(other), "");
      assert.equal(holdsPageBack(other), false);
    }
  });
});

describe("holdsPageBack", () => {
  // [reason, whether the page is kept from being read]
  const table = [
    ["max_tokens", true],
    ["partial_completion", true],
    ["overloaded_error", true],
    ["error_event", true],
    ["error_1037", true],
    ["moderation_blocked", true],
    ["refused", true],
    ["tool_use", false],
    ["stop_reason_unknown", false],
    ["stream_without_final_message", false],
    ["stream_handed_off", false],
    ["stream_unrecognised", false],
    ["stream_broken", false],
    ["no_stream", false],
    ["", false],
  ];
  for (const [reason, holds] of table) {
    it(`${reason || '""'}: ${holds ? "holds the page back" : "leaves the answer to the page"}`, () => {
      assert.equal(holdsPageBack(reason), holds);
    });
  }

  it("withdrawn answers are exactly ChatGPT's moderation and Claude's refusal", () => {
    const withdrawn = Object.keys(REASONS).filter((reason) => verdictOf(reason) === VERDICTS.WITHDRAWN);
    assert.deepEqual(withdrawn.sort(), ["moderation_blocked", "refused"]);
  });
});

describe("StreamState.notFinal", () => {
  it("keeps the first reason, and names one the rule does not know stopped_early", () => {
    const state = new StreamState();
    state.notFinal("refused");
    state.notFinal("max_tokens");
    assert.equal(state.incompleteReason, "refused");
    assert.ok(state.hasFailed && state.isRecognised);
    const odd = new StreamState();
    odd.notFinal("a sentence of the chat");
    assert.equal(odd.incompleteReason, "stopped_early");
  });

  it("keeps a bounded number of unknowns", () => {
    const state = new StreamState();
    for (let code = 0; code < 20; code++) state.unknown({ reason: "error_code_unknown", code });
    assert.equal(state.unknowns.length, 4);
  });
});
