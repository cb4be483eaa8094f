// When a message is final and how it was read (lib/capture.js): each case
// drives the tracker with a platform's recorded-shape stream and the page's
// end-of-message signal, on a fake clock.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { adapterByName } from "../adapters/index.js";
import { CaptureTracker } from "../lib/capture.js";

const claude = adapterByName("claude");
const COMPLETION_URL = "https://claude.ai/api/organizations/org-1/chat_conversations/11111111-2222-4333-8444-555555555555/completion";

function fixture(platform, name) {
  return readFileSync(new URL(`./fixtures/${platform}/${name}.stream`, import.meta.url), "utf8");
}

/** A tracker on a fake clock; `dom` is what the page shows as the last answer. */
function tracked({ dom = { text: "from the page", message_id: "" }, conversation = "11111111-2222-4333-8444-555555555555" } = {}) {
  const reports = [];
  const timers = [];
  const tracker = new CaptureTracker({
    adapter: claude,
    report: (capture, method) => reports.push({ capture, method }),
    readDom: () => dom,
    conversationId: () => conversation,
    graceMs: 1000,
    setTimer: (fn, ms) => {
      const timer = { fn, ms, done: false };
      timers.push(timer);
      return timer;
    },
    clearTimer: (timer) => {
      timer.done = true;
    },
  });
  const elapse = () => {
    for (const timer of timers.splice(0)) if (!timer.done) timer.fn();
  };
  return { tracker, reports, elapse };
}

/** Feeds `text` as one stream in chunks of `size` characters. */
function stream(tracker, id, text, size = 5) {
  tracker.streamStarted(id, { url: COMPLETION_URL, body: null, pageUrl: "https://claude.ai/chat/x" });
  for (let at = 0; at < text.length; at += size) tracker.streamChunk(id, text.slice(at, at + size));
}

// Steps of a case: what the page and the stream of id 1 do, in order.
const writing = ({ tracker }) => tracker.generatingChanged(true);
const written = ({ tracker }) => tracker.generatingChanged(false);
const streamed = (text) => ({ tracker }) => stream(tracker, 1, text);
const ended = (status) => ({ tracker }) => tracker.streamEnded(1, { status });
const aborted = ({ tracker }) => tracker.streamAborted(1);
const graceOver = ({ elapse }) => elapse();
const nothingYet = ({ reports }) => assert.deepEqual(reports, [], "nothing reported yet");

const ANSWER = fixture("claude", "answer_with_baa");

/** [what the tracker does, the steps, how each report it made was read] */
const SEQUENCES = [
  ["reports a stream that ended normally as a network capture, and not the page as well",
    [writing, streamed(ANSWER), ended(200), written, graceOver], ["network"]],
  ["waits for a stream that ends after the page's signal, within the grace period",
    [writing, streamed(ANSWER), written, ended(200), graceOver], ["network"]],
  ["sends nothing for a stream aborted midway, from the stream or from the page",
    [writing, streamed(ANSWER.slice(0, ANSWER.length / 2)), aborted, written, graceOver], []],
  ["sends nothing for a stream of the known shape cut before its end signal",
    [writing, streamed(fixture("claude", "aborted_before_message_stop")), ended(200), written, graceOver], []],
  ["sends nothing for an error status",
    [writing, streamed("<html>oops</html>"), ended(500), written, graceOver], []],
  ["reads the page when the stream's shape was not understood",
    [writing, streamed('data: {"kind": "a shape from next year"}\n\n'), ended(200), written, graceOver], ["dom"]],
  ["leaves an answer still streaming after the grace period to its stream",
    [writing, streamed(ANSWER), written, graceOver, nothingYet, ended(200)], ["network"]],
  ["reports a stream the page never showed (a delivery's reply)",
    [streamed(ANSWER), ended(200)], ["network"]],
  ["cancels its grace timers when stopped",
    [writing, written, ({ tracker }) => tracker.stop(), graceOver], []],
];

describe("CaptureTracker", () => {
  for (const [name, steps, methods] of SEQUENCES) {
    it(name, () => {
      const harness = tracked();
      for (const step of steps) step(harness);
      assert.deepEqual(harness.reports.map((report) => report.method), methods);
    });
  }

  it("takes the capture's text and organization from the stream", () => {
    const { tracker, reports } = tracked();
    stream(tracker, 1, ANSWER);
    tracker.streamEnded(1, { status: 200 });
    assert.match(reports[0].capture.text, /```baa\nfiles\.read/);
    assert.equal(reports[0].capture.organization_id, "org-1");
  });

  it("reads the page when no stream was seen for the answer", () => {
    const { tracker, reports, elapse } = tracked({ dom: { text: "```baa\necho\n{}\n```", message_id: "m-7" } });
    tracker.generatingChanged(true);
    tracker.generatingChanged(false);
    assert.deepEqual(reports, [], "nothing reported before the grace period");
    elapse();
    assert.equal(reports.length, 1);
    assert.equal(reports[0].method, "dom");
    assert.deepEqual(reports[0].capture, {
      conversation_id: "11111111-2222-4333-8444-555555555555", message_id: "m-7", parent_message_id: "",
      organization_id: "", text: "```baa\necho\n{}\n```",
    });
  });

  it("does not send the same page text twice, nor anything for an empty page or a page without a conversation", () => {
    for (const options of [{ dom: { text: "  ", message_id: "" } }, { dom: null }, { conversation: "" }]) {
      const { tracker, reports, elapse } = tracked(options);
      tracker.generatingChanged(true);
      tracker.generatingChanged(false);
      elapse();
      assert.deepEqual(reports, [], JSON.stringify(options));
    }
    const { tracker, reports, elapse } = tracked();
    for (let i = 0; i < 2; i++) {
      tracker.generatingChanged(true);
      tracker.generatingChanged(false);
      elapse();
    }
    assert.equal(reports.length, 1);
  });

  it("follows a bounded number of streams at once", () => {
    const { tracker } = tracked();
    for (let id = 0; id < 100; id++) tracker.streamStarted(id, { url: COMPLETION_URL, body: null });
    assert.ok(tracker.streams.size <= 16);
  });
});
