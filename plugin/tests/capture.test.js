// When a message is final and how it was read (lib/capture.js): each case
// drives the tracker with a platform's recorded-shape stream and the page's
// end-of-message signal, on a fake clock.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { adapterByName } from "../adapters/index.js";
import { CaptureTracker } from "../lib/capture.js";

const claude = adapterByName("claude");
const chatgpt = adapterByName("chatgpt");
const COMPLETION_URL = "https://claude.ai/api/organizations/org-1/chat_conversations/11111111-2222-4333-8444-555555555555/completion";

function fixture(platform, name) {
  return readFileSync(new URL(`./fixtures/${platform}/${name}.stream`, import.meta.url), "utf8");
}

function expectedOf(platform, name) {
  return JSON.parse(readFileSync(new URL(`./fixtures/${platform}/${name}.expected.json`, import.meta.url), "utf8"));
}

/** Starts fixture `name` as stream `id`, with the request it was recorded for, and feeds it whole. */
function recorded(tracker, id, platform, name) {
  const { request } = expectedOf(platform, name);
  tracker.streamStarted(id, { url: request.requestUrl, body: request.requestBody, pageUrl: request.pageUrl });
  tracker.streamChunk(id, fixture(platform, name));
}

/** A tracker on a fake clock; `dom` is what the page shows as the last answer. */
function tracked({ dom = { text: "from the page", message_id: "" }, conversation = "11111111-2222-4333-8444-555555555555", adapter = claude } = {}) {
  const reports = [];
  const notices = [];
  const withdrawals = [];
  const timers = [];
  // The page shows an earlier answer until it starts writing this one.
  let shown = { text: "an earlier answer", message_id: "m-earlier" };
  const tracker = new CaptureTracker({
    adapter,
    report: (capture, method) => reports.push({ capture, method }),
    notice: (kind, detail) => notices.push({ kind, detail }),
    withdrawn: (note) => withdrawals.push(note),
    readDom: () => shown,
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
  // The fake page: it shows the new answer once it stopped writing, unless
  // `write({showsAnswer: false})` said it fails to (a failed stream).
  let willShow = dom;
  const signal = tracker.generatingChanged.bind(tracker);
  tracker.generatingChanged = (isGenerating) => {
    if (!isGenerating) shown = willShow;
    signal(isGenerating);
  };
  const write = ({ showsAnswer = true } = {}) => {
    willShow = showsAnswer ? dom : shown;
    tracker.generatingChanged(true);
  };
  return { tracker, reports, notices, withdrawals, elapse, write };
}

/** Feeds `text` as one stream in chunks of `size` characters. */
function stream(tracker, id, text, size = 5) {
  tracker.streamStarted(id, { url: COMPLETION_URL, body: null, pageUrl: "https://claude.ai/chat/x" });
  for (let at = 0; at < text.length; at += size) tracker.streamChunk(id, text.slice(at, at + size));
}

// Steps of a case: what the page and the stream of id 1 do, in order.
const writing = ({ write }) => write();
const writingNothingNew = ({ write }) => write({ showsAnswer: false });
const written = ({ tracker }) => tracker.generatingChanged(false);
const streamed = (text) => ({ tracker }) => stream(tracker, 1, text);
const ended = (status) => ({ tracker }) => tracker.streamEnded(1, { status });
const stopped = ({ tracker }) => tracker.streamAborted(1, { reason: "AbortError" });
const stoppedXhr = ({ tracker }) => tracker.streamAborted(1, { reason: "abort" });
const broken = ({ tracker }) => tracker.streamAborted(1, { reason: "TypeError" });
const graceOver = ({ elapse }) => elapse();
const nothingYet = ({ reports }) => assert.deepEqual(reports, [], "nothing reported yet");

const ANSWER = fixture("claude", "answer_with_baa");

/** [what the tracker does, the steps, how each report it made was read] */
const SEQUENCES = [
  ["reports a stream that ended normally as a network capture, and not the page as well",
    [writing, streamed(ANSWER), ended(200), written, graceOver], ["network"]],
  ["waits for a stream that ends after the page's signal, within the grace period",
    [writing, streamed(ANSWER), written, ended(200), graceOver], ["network"]],
  ["sends nothing for a stream the page itself stopped midway, from the stream or from the page",
    [writing, streamed(ANSWER.slice(0, ANSWER.length / 2)), stopped, written, graceOver], []],
  ["sends nothing for an XMLHttpRequest the page aborted",
    [writing, streamed(ANSWER.slice(0, ANSWER.length / 2)), stoppedXhr, written, graceOver], []],
  ["reads the page for a stream whose connection broke midway",
    [writing, streamed(ANSWER.slice(0, ANSWER.length / 2)), broken, written, graceOver], ["dom"]],
  ["reads the page for a stream of the known shape that ended without a final message",
    [writing, streamed(fixture("claude", "aborted_before_message_stop")), ended(200), written, graceOver], ["dom"]],
  ["reads the page when such a stream ends after the grace period",
    [writing, streamed(fixture("claude", "aborted_before_message_stop")), written, graceOver, nothingYet, ended(200)], ["dom"]],
  ["sends nothing for a stream that said it stopped early (an error event mid-answer), from the stream or from the page",
    [writing, streamed(fixture("claude", "error_event")), ended(200), written, graceOver], []],
  ["sends nothing either when that stream ends after the grace period",
    [writing, streamed(fixture("claude", "error_event")), written, graceOver, ended(200)], []],
  ["does not read the page again when a stream failed and the page shows no new answer",
    [writingNothingNew, streamed(fixture("claude", "error_event")), ended(200), written, graceOver], []],
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
    const { tracker, reports, elapse, write } = tracked({ dom: { text: "```baa\necho\n{}\n```", message_id: "m-7" } });
    write();
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
      const { tracker, reports, elapse, write } = tracked(options);
      write();
      tracker.generatingChanged(false);
      elapse();
      assert.deepEqual(reports, [], JSON.stringify(options));
    }
    const { tracker, reports, elapse, write } = tracked();
    for (let i = 0; i < 2; i++) {
      write();
      tracker.generatingChanged(false);
      elapse();
    }
    assert.equal(reports.length, 1);
  });

  it("says why it read the page, without any of the chat's text", () => {
    const { tracker, notices, elapse, write } = tracked();
    stream(tracker, 1, 'data: {"kind": "a shape from next year"}\n\n');
    tracker.streamEnded(1, { status: 200, contentType: "text/event-stream; charset=utf-8" });
    write();
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(notices, [
      {
        kind: "stream_unrecognised",
        detail: { path: "/api/organizations/*/chat_conversations/*/completion", content_type: "text/event-stream", signature: ["keys:kind"] },
      },
      { kind: "dom_fallback_used", detail: { reason: "stream_unrecognised" } },
    ]);
  });

  it("follows a bounded number of streams at once", () => {
    const { tracker } = tracked();
    for (let id = 0; id < 100; id++) tracker.streamStarted(id, { url: COMPLETION_URL, body: null });
    assert.ok(tracker.streams.size <= 16);
  });
});

describe("CaptureTracker with answers that stopped early", () => {
  // Each site's "stopped early" stream, the page showing the partial text
  // (or a banner) afterwards, then the person's continuation or retry.
  const CASES = [
    { platform: "chatgpt", stopped: "v1_partial_max_tokens", reason: "max_tokens", path: "/backend-api/f/conversation",
      next: "v1_continue_whole_message", conversation: "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718" },
    { platform: "claude", stopped: "error_event", reason: "overloaded_error",
      path: "/api/organizations/*/chat_conversations/*/completion",
      next: "answer_with_baa", conversation: "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0" },
    { platform: "gemini", stopped: "usage_limit_after_text", reason: "error_1037",
      path: "/*/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate",
      next: "answer_with_baa_and_emoji", conversation: "4f2a9e7b1c3d5e6f" },
  ];

  for (const { platform, stopped, reason, path, next, conversation } of CASES) {
    it(`${platform}: sends nothing for ${stopped}, though the page shows the partial text, and says why`, () => {
      const partial = { text: "I'll write the file.\n\n```baa\nfiles.write\n{\"path\": \"notes/lo", message_id: "m-partial" };
      const { tracker, reports, notices, elapse, write } = tracked({ adapter: adapterByName(platform), conversation, dom: partial });
      write();
      recorded(tracker, 1, platform, stopped);
      tracker.streamEnded(1, { status: 200 });
      tracker.generatingChanged(false);
      elapse();
      assert.deepEqual(reports, []);
      assert.deepEqual(notices, [{ kind: "stream_incomplete", detail: { reason, path } }]);
    });

    it(`${platform}: sends the next complete stream of that turn once (${next})`, () => {
      const whole = expectedOf(platform, next).capture;
      const { tracker, reports, elapse, write } = tracked({ adapter: adapterByName(platform), conversation, dom: { text: whole.text, message_id: whole.message_id } });
      write();
      recorded(tracker, 1, platform, stopped);
      tracker.streamEnded(1, { status: 200 });
      tracker.generatingChanged(false);
      elapse();
      // The person continues (ChatGPT: the same message, whole) or retries.
      write();
      recorded(tracker, 2, platform, next);
      tracker.streamEnded(2, { status: 200 });
      tracker.generatingChanged(false);
      elapse();
      assert.deepEqual(reports, [{ capture: whole, method: "network" }]);
    });
  }
});

describe("CaptureTracker with ChatGPT's continuation of a held answer", () => {
  const CONVERSATION = "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718";
  const whole = expectedOf("chatgpt", "v1_continue_whole_message").capture;

  /** The cut answer, then the continuation `next`, each as the page writes it. */
  function continued(next) {
    const harness = tracked({ adapter: chatgpt, conversation: CONVERSATION, dom: { text: whole.text, message_id: whole.message_id } });
    const { tracker, elapse, write } = harness;
    write();
    recorded(tracker, 1, "chatgpt", "v1_partial_max_tokens");
    tracker.streamEnded(1, { status: 200 });
    tracker.generatingChanged(false);
    elapse();
    write();
    recorded(tracker, 2, "chatgpt", next);
    tracker.streamEnded(2, { status: 200 });
    tracker.generatingChanged(false);
    elapse();
    return harness.reports;
  }

  it("sends a continuation that streams the whole message as it is", () => {
    assert.deepEqual(continued("v1_continue_whole_message"), [{ capture: whole, method: "network" }]);
  });

  it("puts the held partial text before a continuation that streams only what it added", () => {
    const reports = continued("v1_continue_new_text_only");
    assert.deepEqual(reports, [{ capture: whole, method: "network" }]);
  });

  it("holds a bounded number of partial answers", () => {
    const { tracker } = tracked({ adapter: chatgpt, conversation: CONVERSATION });
    for (let n = 0; n < 50; n++) tracker.hold({ message_id: `m-${n}`, text: "part" });
    assert.equal(tracker.held.size, 4);
    assert.ok(tracker.held.has("m-49") && !tracker.held.has("m-0"));
  });
});

describe("CaptureTracker with ChatGPT's stream handoff", () => {
  const CONVERSATION = "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718";
  const expected = (name) => expectedOf("chatgpt", name);
  const leg = (tracker, id, name) => recorded(tracker, id, "chatgpt", name);

  function harness() {
    return tracked({ adapter: chatgpt, conversation: CONVERSATION, dom: { text: "from the page", message_id: "m-page" } });
  }

  it("reads the answer from the /resume stream that continues the first leg, with its ids, once", () => {
    const { tracker, reports, elapse, write } = harness();
    write();
    leg(tracker, 1, "v1_handoff_first_leg");
    tracker.streamEnded(1, { status: 200 });
    leg(tracker, 2, "v1_resume_answer_with_baa");
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports, [], "the continuation is still streaming");
    tracker.streamEnded(2, { status: 200 });
    elapse();
    assert.deepEqual(reports, [{ capture: expected("v1_resume_answer_with_baa").capture, method: "network" }]);
  });

  it("attaches the continuation to the handed-off answer even when the page's signal went off in between", () => {
    const { tracker, reports, elapse, write } = harness();
    write();
    leg(tracker, 1, "v1_handoff_first_leg");
    tracker.streamEnded(1, { status: 200 });
    tracker.generatingChanged(false);
    tracker.generatingChanged(true);
    leg(tracker, 2, "v1_resume_answer_with_baa");
    tracker.streamEnded(2, { status: 200 });
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports.map((report) => report.method), ["network"]);
  });

  it("leaves an answer handed off to the websocket to the page, with the page's message id", () => {
    const { tracker, reports, notices, elapse, write } = harness();
    write();
    leg(tracker, 1, "v1_handoff_websocket_only");
    tracker.streamEnded(1, { status: 200 });
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports.map((report) => [report.method, report.capture.message_id]), [["dom", "m-page"]]);
    assert.deepEqual(notices.at(-1), { kind: "dom_fallback_used", detail: { reason: "stream_handed_off" } });
  });

  it("reads the page when the continuation ends before its answer finished", () => {
    const { tracker, reports, elapse, write } = harness();
    write();
    leg(tracker, 1, "v1_handoff_first_leg");
    tracker.streamEnded(1, { status: 200 });
    leg(tracker, 2, "v1_resume_cut_before_complete");
    tracker.streamEnded(2, { status: 200 });
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports.map((report) => report.method), ["dom"]);
  });

  it("makes citation markers readable in a page capture as in a network one", () => {
    const page = "Paris \uE200cite\uE202turn0search0\uE201is the capital.";
    const { tracker, reports, elapse, write } = tracked({ adapter: chatgpt, conversation: CONVERSATION, dom: { text: page, message_id: "" } });
    write();
    tracker.generatingChanged(false);
    elapse();
    assert.equal(reports[0].capture.text, "Paris is the capital.");
  });
});

describe("CaptureTracker on what is final, in 2026", () => {
  const PATHS = {
    claude: "/api/organizations/*/chat_conversations/*/completion",
    chatgpt: "/backend-api/f/conversation",
    gemini: "/*/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate",
  };
  const CONVERSATIONS = { claude: "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0", chatgpt: "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718", gemini: "4f2a9e7b1c3d5e6f" };

  /** One turn of fixture `name`: the page writes, the stream ends, the page stops, the grace period passes. */
  function turn(platform, name, { dom } = {}) {
    const shown = dom ?? { text: "what the page shows", message_id: "m-page" };
    const harness = tracked({ adapter: adapterByName(platform), conversation: CONVERSATIONS[platform], dom: shown });
    const { tracker, elapse, write } = harness;
    write();
    recorded(tracker, 1, platform, name);
    tracker.streamEnded(1, { status: 200, contentType: "text/event-stream; charset=utf-8" });
    tracker.generatingChanged(false);
    elapse();
    return harness;
  }

  // [platform, fixture]: a finished answer, read from the stream once, the page not read as well.
  const FINISHED = [
    ["gemini", "first_turn_1096_trailer_no_token"],
    ["gemini", "context_token_as_sparse_key"],
    ["gemini", "follow_up_suggestions"],
    ["chatgpt", "v1_bare_patch_arrays"],
    ["chatgpt", "v1_patch_with_own_path"],
    ["claude", "model_fallback_inside_baa"],
  ];
  for (const [platform, name] of FINISHED) {
    it(`${platform}: sends ${name} once, from its stream, with its text`, () => {
      const { reports, notices, withdrawals } = turn(platform, name);
      assert.deepEqual(reports, [{ capture: expectedOf(platform, name).capture, method: "network" }]);
      assert.deepEqual(notices, []);
      assert.deepEqual(withdrawals, []);
    });
  }

  // [platform, fixture, reason, whether the person is told it was withdrawn]: never sent, from the stream or the page.
  const HELD_BACK = [
    ["gemini", "abandoned_at_status_1_then_1096", "error_1096", false],
    ["chatgpt", "v1_moderation_blocked", "moderation_blocked", true],
    ["claude", "max_tokens_inside_baa", "max_tokens", false],
    ["claude", "refusal_after_baa", "refused", true],
  ];
  for (const [platform, name, reason, isWithdrawn] of HELD_BACK) {
    it(`${platform}: never sends ${name}, though the page shows it, and says why (${reason})`, () => {
      const partial = { text: "I'll write the file.\n\n```baa\nfiles.write\n{\"path\": \"notes/long.md\"}\n```", message_id: "m-page" };
      const { reports, notices, withdrawals } = turn(platform, name, { dom: partial });
      assert.deepEqual(reports, []);
      assert.deepEqual(notices, [{ kind: "stream_incomplete", detail: { reason, path: PATHS[platform] } }]);
      assert.deepEqual(withdrawals, isWithdrawn ? [{ reason, conversation_id: CONVERSATIONS[platform] }] : []);
    });
  }

  it("gemini: sends an answer followed by a code it does not know, and reports the code", () => {
    const { reports, notices } = turn("gemini", "unknown_code_after_answer");
    assert.deepEqual(reports, [{ capture: expectedOf("gemini", "unknown_code_after_answer").capture, method: "network" }]);
    assert.equal(notices.length, 1);
    assert.equal(notices[0].kind, "stream_unrecognised");
    const { signature, ...rest } = notices[0].detail;
    assert.deepEqual(rest, { reason: "error_code_unknown", code: 4242, path: PATHS.gemini, content_type: "text/event-stream" });
    assert.deepEqual(signature, ["xssi", "length", "array"]);
  });

  it("claude: reads the page for a stop reason it does not know, once the page finished, and reports it", () => {
    const page = { text: "what the page shows", message_id: "" };
    const { reports, notices } = turn("claude", "unknown_stop_reason", { dom: page });
    assert.deepEqual(reports.map(({ capture, method }) => [capture.text, method]), [[page.text, "dom"]]);
    assert.deepEqual(notices.map(({ kind, detail }) => [kind, detail.reason]), [
      ["stream_unrecognised", "stop_reason_unknown"],
      ["dom_fallback_used", "stop_reason_unknown"],
    ]);
  });

  it("claude: waits for the page's own finish signal before reading it for such a stop reason", () => {
    const { tracker, reports, elapse, write } = tracked({ adapter: claude, conversation: CONVERSATIONS.claude });
    write();
    recorded(tracker, 1, "claude", "unknown_stop_reason");
    tracker.streamEnded(1, { status: 200 });
    elapse();
    assert.deepEqual(reports, [], "the page is still writing");
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports.map((report) => report.method), ["dom"]);
  });

  it("gemini: a finished answer from a later stream of the same turn is sent after one that stopped", () => {
    const whole = expectedOf("gemini", "first_turn_1096_trailer_no_token").capture;
    const { tracker, reports, elapse, write } = tracked({ adapter: adapterByName("gemini"), conversation: CONVERSATIONS.gemini });
    write();
    recorded(tracker, 1, "gemini", "abandoned_at_status_1_then_1096");
    tracker.streamEnded(1, { status: 200 });
    recorded(tracker, 2, "gemini", "first_turn_1096_trailer_no_token");
    tracker.streamEnded(2, { status: 200 });
    tracker.generatingChanged(false);
    elapse();
    assert.deepEqual(reports, [{ capture: whole, method: "network" }]);
  });
});
