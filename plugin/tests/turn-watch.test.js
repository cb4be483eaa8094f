import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { CaptureTracker } from "../lib/capture.js";
import { DEFAULT_QUIET_MS, quietMsOf, TurnWatch } from "../lib/turn-watch.js";

const OLD = { id: "old" };
const NEW = { id: "new" };
const NEWER = { id: "newer" };
const look = (turn, text, { isStreaming = false, isFinishedShown = true } = {}) => ({ isStreaming, turn, text, isFinishedShown });

/** Looks in order, each [ms, look]; the states. */
function run(watch, looks) {
  return looks.map(([ms, seen]) => watch.look(seen, ms));
}

describe("TurnWatch: the streaming signal", () => {
  it("finishes the newest turn when the signal drops, once", () => {
    const states = run(new TurnWatch(), [
      [0, look(OLD, "before")],
      [100, look(OLD, "before", { isStreaming: true })],
      [200, look(NEW, "Let me", { isStreaming: true })],
      [300, look(NEW, "Let me check", { isStreaming: false })],
      [400, look(NEW, "Let me check, rendered")],
      [9000, look(NEW, "Let me check, rendered")],
    ]);
    assert.deepEqual(states.map((s) => [s.isWriting, s.finished]), [[false, ""], [true, ""], [true, ""], [false, "signal"], [false, ""], [false, ""]]);
    assert.equal(states[3].signalNeverSeen, false);
  });

  it("waits for the finished markers after the signal dropped", () => {
    const states = run(new TurnWatch(), [
      [0, look(null, "")],
      [100, look(NEW, "a", { isStreaming: true, isFinishedShown: false })],
      [200, look(NEW, "ab", { isFinishedShown: false })],
      [300, look(NEW, "ab")],
    ]);
    assert.deepEqual(states.map((s) => s.finished), ["", "", "", "signal"]);
    assert.equal(states[2].isWriting, true);
  });
});

describe("TurnWatch: the quiet rule, where the signal is never seen", () => {
  it("finishes a turn that grew and then kept its text for quietMs, with its markers there, exactly once", () => {
    const watch = new TurnWatch({ quietMs: 3000 });
    const states = run(watch, [
      [0, look(OLD, "the answer before")],
      [1000, look(NEW, "Let me check…")],
      [2200, look(NEW, "Checking: the whole answer")],
      [4000, look(NEW, "Checking: the whole answer")],
      [5200, look(NEW, "Checking: the whole answer")],
      [5300, look(NEW, "Checking: the whole answer")],
      [60_000, look(NEW, "Checking: the whole answer")],
    ]);
    assert.deepEqual(states.map((s) => [s.isWriting, s.finished]), [
      [false, ""], [false, ""], [true, ""], [true, ""], [false, "quiet"], [false, ""], [false, ""],
    ]);
    assert.equal(states[4].signalNeverSeen, true);
    assert.equal(watch.isWriting, false);
  });

  it("never finishes a turn still growing", () => {
    const watch = new TurnWatch({ quietMs: 3000 });
    const looks = [[0, look(null, "")]];
    for (let ms = 1000, text = "a"; ms <= 20_000; ms += 1000, text += "a") looks.push([ms, look(NEW, text)]);
    assert.ok(run(watch, looks).every((s) => s.finished === ""));
    assert.equal(watch.isWriting, true);
  });

  it("waits while the turn does not show its finished markers", () => {
    const states = run(new TurnWatch({ quietMs: 3000 }), [
      [0, look(null, "")],
      [100, look(NEW, "a", { isFinishedShown: false })],
      [200, look(NEW, "ab", { isFinishedShown: false })],
      [9000, look(NEW, "ab", { isFinishedShown: false })],
      [9100, look(NEW, "ab")],
    ]);
    assert.deepEqual(states.map((s) => s.finished), ["", "", "", "", "quiet"]);
  });

  it("never takes a turn the page rendered whole (a history loaded after the first look) for an answer", () => {
    const states = run(new TurnWatch({ quietMs: 3000 }), [
      [0, look(null, "")],
      [500, look(OLD, "an answer from yesterday")],
      [60_000, look(OLD, "an answer from yesterday")],
    ]);
    assert.ok(states.every((s) => !s.isWriting && s.finished === ""));
  });

  it("follows the next turn after one finished, and says the signal was seen on the page", () => {
    const watch = new TurnWatch({ quietMs: 3000 });
    const states = run(watch, [
      [0, look(OLD, "x")],
      [100, look(NEW, "a", { isStreaming: true })],
      [200, look(NEW, "ab")],
      [1000, look(NEWER, "")],
      [1100, look(NEWER, "grown")],
      [4200, look(NEWER, "grown")],
    ]);
    assert.deepEqual(states.map((s) => s.finished), ["", "", "signal", "", "", "quiet"]);
    assert.equal(states[5].signalNeverSeen, false);
  });

  it("says when a look is due: quietMs after the followed turn's last change", () => {
    const watch = new TurnWatch({ quietMs: 3000 });
    watch.look(look(null, ""), 0);
    assert.equal(watch.wakeIn(0), null);
    watch.look(look(NEW, "a"), 100);
    assert.equal(watch.wakeIn(100), null); // not grown yet: nothing to finish
    watch.look(look(NEW, "ab"), 200);
    assert.equal(watch.wakeIn(1200), 2000);
    watch.look(look(NEW, "ab"), 3200);
    assert.equal(watch.wakeIn(3200), null);
  });
});

describe("quietMsOf", () => {
  for (const [value, ms] of [[undefined, DEFAULT_QUIET_MS], ["x", DEFAULT_QUIET_MS], [-5, DEFAULT_QUIET_MS], [10, 1000], [4500, 4500], [1e9, 30_000]]) {
    it(`${value} -> ${ms}`, () => assert.equal(quietMsOf(value), ms));
  }
});

describe("TurnWatch with the capture tracker", () => {
  it("sends an answer finished by the quiet rule exactly once, after its grace period", () => {
    const timers = [];
    const sent = [];
    let shown = "the answer before";
    const watch = new TurnWatch({ quietMs: 3000 });
    const tracker = new CaptureTracker({
      adapter: { createStreamParser: () => null },
      report: (capture, method) => sent.push([capture.text, method]),
      readDom: () => (watch.isWriting ? null : { text: shown, message_id: "" }),
      conversationId: () => "c1",
      setTimer: (fn) => timers.push(fn),
      clearTimer: () => {},
    });
    const step = (ms, turn, text) => {
      shown = text;
      tracker.generatingChanged(watch.look(look(turn, text), ms).isWriting);
    };
    step(0, OLD, "the answer before");
    step(1000, NEW, "Let me check…");
    step(2200, NEW, "Checking: done");
    step(5300, NEW, "Checking: done");
    step(9000, NEW, "Checking: done");
    while (timers.length) timers.shift()();
    step(20_000, NEW, "Checking: done");
    while (timers.length) timers.shift()();
    assert.deepEqual(sent, [["Checking: done", "dom"]]);
  });
});
