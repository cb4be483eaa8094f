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

describe("CaptureTracker", () => {
  it("reports a stream that ended normally as a network capture, and not the page as well", () => {
    const { tracker, reports, elapse } = tracked();
    tracker.generatingChanged(true);
    stream(tracker, 1, fixture("claude", "answer_with_baa"));
    tracker.generatingChanged(false);
    tracker.streamEnded(1, { status: 200 });
    elapse();
    assert.equal(reports.length, 1);
    assert.equal(reports[0].method, "network");
    assert.match(reports[0].capture.text, /```baa\nfiles\.read/);
    assert.equal(reports[0].capture.organization_id, "org-1");
  });

  it("sends nothing for a stream aborted midway, from the stream or from the page", () => {
    const { tracker, reports, elapse } = tracked();
    tracker.generatingChanged(true);
    const text = fixture("claude", "answer_with_baa");
    stream(tracker, 1, text.slice(0, text.length / 2));
    tracker.streamAborted(1);
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports, []);
  });

  it("sends nothing for a stream of the known shape cut before its end signal", () => {
    const { tracker, reports, elapse } = tracked();
    tracker.generatingChanged(true);
    stream(tracker, 1, fixture("claude", "aborted_before_message_stop"));
    tracker.streamEnded(1, { status: 200 });
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports, []);
  });

  it("sends nothing for an error status", () => {
    const { tracker, reports, elapse } = tracked();
    tracker.generatingChanged(true);
    stream(tracker, 1, "<html>oops</html>");
    tracker.streamEnded(1, { status: 500 });
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports, []);
  });

  it("reads the page when no stream was seen for the answer", () => {
    const { tracker, reports, elapse } = tracked({ dom: { text: "```baa\necho\n{}\n```", message_id: "m-7" } });
    tracker.generatingChanged(true);
    tracker.generatingChanged(false);
    assert.deepEqual(reports, [], "not before the grace period");
    elapse();
    assert.equal(reports.length, 1);
    assert.equal(reports[0].method, "dom");
    assert.deepEqual(reports[0].capture, {
      conversation_id: "11111111-2222-4333-8444-555555555555", message_id: "m-7", parent_message_id: "",
      organization_id: "", text: "```baa\necho\n{}\n```",
    });
  });

  it("reads the page when the stream's shape was not understood", () => {
    const { tracker, reports, elapse } = tracked();
    tracker.generatingChanged(true);
    stream(tracker, 1, "data: {\"kind\": \"a shape from next year\"}\n\n");
    tracker.streamEnded(1, { status: 200 });
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports.map((report) => report.method), ["dom"]);
  });

  it("waits for a stream that ends after the page's signal, within the grace period", () => {
    const { tracker, reports, elapse } = tracked();
    tracker.generatingChanged(true);
    stream(tracker, 1, fixture("claude", "answer_with_baa"));
    tracker.generatingChanged(false);
    tracker.streamEnded(1, { status: 200 });
    elapse();
    assert.deepEqual(reports.map((report) => report.method), ["network"]);
  });

  it("leaves an answer still streaming after the grace period to its stream", () => {
    const { tracker, reports, elapse } = tracked();
    tracker.generatingChanged(true);
    stream(tracker, 1, fixture("claude", "answer_with_baa"));
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports, []);
    tracker.streamEnded(1, { status: 200 });
    assert.deepEqual(reports.map((report) => report.method), ["network"]);
  });

  it("reports a stream the page never showed (a delivery's reply)", () => {
    const { tracker, reports } = tracked();
    stream(tracker, 1, fixture("claude", "answer_with_baa"));
    tracker.streamEnded(1, { status: 200 });
    assert.deepEqual(reports.map((report) => report.method), ["network"]);
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

  it("cancels its grace timers when stopped", () => {
    const { tracker, reports, elapse } = tracked();
    tracker.generatingChanged(true);
    tracker.generatingChanged(false);
    tracker.stop();
    elapse();
    assert.deepEqual(reports, []);
  });
});
