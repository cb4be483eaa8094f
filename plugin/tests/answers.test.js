// Questions to the server (lib/answers.js): matching an answer to its
// question by id, the timeout, a closed socket, and what a refusal says.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { NotConnected, PendingAnswers, ServerRefused, answerOf } from "../lib/answers.js";

/** Timers the test fires by hand. */
function manualTimers() {
  const timers = new Map();
  let next = 1;
  return {
    setTimer: (fn, ms) => (timers.set(next, { fn, ms }), next++),
    clearTimer: (id) => timers.delete(id),
    fireAll() {
      for (const [id, { fn }] of [...timers]) {
        timers.delete(id);
        fn();
      }
    },
    get count() {
      return timers.size;
    },
  };
}

describe("PendingAnswers", () => {
  it("resolves a question with the frame that carries its id, and only that one", async () => {
    const timers = manualTimers();
    const answers = new PendingAnswers({ ...timers });
    const sent = [];
    const first = answers.ask("a", () => (sent.push("a"), true), "guide.get");
    const second = answers.ask("b", () => (sent.push("b"), true), "guide.get");
    assert.deepEqual(sent, ["a", "b"]);
    assert.equal(answers.answer({ type: "guide", id: "zzz" }), false);
    assert.equal(answers.answer({ type: "pong" }), false);
    assert.equal(answers.answer({ type: "guide", id: "b", text: "B" }), true);
    assert.equal((await second).text, "B");
    assert.equal(answers.answer({ type: "error", id: "a", code: "invalid" }), true);
    assert.equal((await first).code, "invalid");
    assert.equal(answers.size, 0);
    assert.equal(timers.count, 0, "answered questions leave no timer behind");
  });

  it("an answer that comes twice is consumed once", async () => {
    const answers = new PendingAnswers({ ...manualTimers() });
    const asked = answers.ask("a", () => true, "guide.get");
    assert.equal(answers.answer({ type: "guide", id: "a" }), true);
    assert.equal(answers.answer({ type: "guide", id: "a" }), false);
    await asked;
  });

  it("fails at once when the socket is not open, leaving nothing waiting", async () => {
    const timers = manualTimers();
    const answers = new PendingAnswers({ ...timers });
    await assert.rejects(answers.ask("a", () => false, "guide.get"), NotConnected);
    assert.equal(answers.size, 0);
    assert.equal(timers.count, 0);
  });

  it("fails with the sender's error when sending throws", async () => {
    const answers = new PendingAnswers({ ...manualTimers() });
    await assert.rejects(answers.ask("a", () => { throw new Error("socket gone"); }, "guide.get"), /socket gone/);
    assert.equal(answers.size, 0);
  });

  it("times out with a message naming the question and the time", async () => {
    const timers = manualTimers();
    const answers = new PendingAnswers({ timeoutMs: 10_000, ...timers });
    const asked = answers.ask("a", () => true, "guide.get");
    timers.fireAll();
    await assert.rejects(asked, { message: "the server did not answer guide.get within 10 s" });
    assert.equal(answers.answer({ type: "guide", id: "a" }), false, "a late answer is ignored");
  });

  it("fails every waiting question when the socket closes", async () => {
    const timers = manualTimers();
    const answers = new PendingAnswers({ ...timers });
    const asked = [answers.ask("a", () => true, "guide.get"), answers.ask("b", () => true, "guide.get")];
    answers.failAll("the connection closed");
    for (const question of asked) await assert.rejects(question, { name: "NotConnected", message: "the connection closed" });
    assert.equal(timers.count, 0);
  });

  it("times out on the platform's own timers when none are given", async () => {
    const answers = new PendingAnswers({ timeoutMs: 20 });
    await assert.rejects(answers.ask("a", () => true, "guide.get"), /did not answer guide.get/);
  });

  it("refuses a second question with the same id", async () => {
    const answers = new PendingAnswers({ ...manualTimers() });
    const first = answers.ask("a", () => true, "guide.get");
    await assert.rejects(answers.ask("a", () => true, "guide.get"), /already waiting/);
    answers.answer({ type: "guide", id: "a" });
    await first;
  });
});

describe("answerOf", () => {
  it("gives the answer of the expected type", () => {
    const frame = { type: "status", id: "q", messages: [] };
    assert.equal(answerOf(frame, "status"), frame);
  });
  it("turns an error frame into ServerRefused with its code and detail", () => {
    assert.throws(() => answerOf({ type: "error", id: "q", code: "invalid", detail: "not yours" }, "ack"), (error) => {
      assert.ok(error instanceof ServerRefused);
      assert.equal(error.code, "invalid");
      assert.equal(error.message, "the server refused: not yours (invalid)");
      return true;
    });
  });
  it("refuses an answer of another type", () => {
    assert.throws(() => answerOf({ type: "guide", id: "q" }, "status"), { name: "ServerRefused", code: "invalid" });
  });
});
