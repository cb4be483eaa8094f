// Adapter reports (lib/reports.js): their shape signature, the detail they
// may carry, the once-a-minute batching that survives a worker restart, and
// the property that no report can carry a chat's text.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { ADAPTERS } from "../adapters/index.js";
import { CaptureTracker } from "../lib/capture.js";
import { REPORT_INTERVAL_MS, ReportBatcher, StreamSignature, reportDetail, reportPath } from "../lib/reports.js";

const REQUEST_URLS = {
  claude: "https://claude.ai/api/organizations/0b1c/chat_conversations/11111111-2222-4333-8444-555555555555/completion",
  chatgpt: "https://chatgpt.com/backend-api/f/conversation",
  gemini: "https://gemini.google.com/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate?bl=boq&_reqid=1",
};

describe("StreamSignature", () => {
  it("names SSE events and the top-level keys of JSON data, never values", () => {
    const signature = new StreamSignature();
    signature.feed('event: delta\ndata: {"o": "append", "p": "/message/content/parts/0", "v": "sec');
    signature.feed('ret words"}\n\nevent: delta\ndata: {"v": "more"}\n\ndata: [DONE]\n\n');
    assert.deepEqual(signature.signature(), ["event:delta", "keys:o,p,v", "keys:v", "done"]);
  });

  it("describes length-prefixed frames, arrays and plain text by kind only", () => {
    const signature = new StreamSignature();
    signature.feed(')]}\'\n\n42\n[["wrb.fr",null,"[\\"hello there\\"]"]]\nHello, a whole sentence.\n');
    assert.deepEqual(signature.signature(), ["xssi", "length", "array", "text"]);
  });

  it("stays within a detail value's 200 characters", () => {
    const signature = new StreamSignature();
    for (let i = 0; i < 40; i++) signature.feed(`event: event_name_number_${i}\n`);
    assert.ok(signature.signature().join(",").length <= 200);
  });
});

describe("reportPath and reportDetail", () => {
  it("keeps a path without its query and without ids", () => {
    assert.equal(reportPath(REQUEST_URLS.claude), "/api/organizations/*/chat_conversations/*/completion");
    assert.equal(reportPath("https://chatgpt.com/backend-api/f/conversation?token=abc"), "/backend-api/f/conversation");
  });

  it("drops entries it does not know and values that do not look like theirs", () => {
    const detail = reportDetail({
      path: "/backend-api/conversation",
      content_type: "text/event-stream",
      signature: ["event:delta", "keys:o,p,v"],
      reason: "stream_unrecognised",
      text: "the answer",
      selectors: "a whole sentence of text",
      status: 403,
    });
    assert.deepEqual(detail, {
      path: "/backend-api/conversation",
      content_type: "text/event-stream",
      signature: ["event:delta", "keys:o,p,v"],
      reason: "stream_unrecognised",
      status: 403,
    });
  });
});

describe("ReportBatcher", () => {
  const report = { platform: "chatgpt", adapter: "2026-11-29", kind: "dom_fallback_used", detail: { reason: "no_stream" } };

  it("sends the first report at once, then at most one a minute per platform and kind, counting in between", () => {
    const batcher = new ReportBatcher();
    batcher.add(report, 1_000);
    const [first] = batcher.due(1_000);
    assert.equal(first.frame.count, 1);
    batcher.sent(first.key, 1_000);
    for (let i = 0; i < 13; i++) batcher.add(report, 2_000 + i);
    batcher.add({ ...report, kind: "selector_missing", detail: { selectors: "composer" } }, 3_000);
    assert.deepEqual(batcher.due(30_000).map(({ frame }) => frame.kind), ["selector_missing"]);
    batcher.sent("chatgpt:selector_missing", 30_000);
    assert.deepEqual(batcher.due(1_000 + REPORT_INTERVAL_MS - 1), []);
    const [later] = batcher.due(1_000 + REPORT_INTERVAL_MS);
    assert.equal(later.frame.count, 13);
    assert.equal(later.frame.first_at, new Date(2_000).toISOString());
    assert.equal(later.frame.last_at, new Date(2_012).toISOString());
  });

  it("keeps its counts across a worker restart (its state is JSON in chrome.storage)", () => {
    const batcher = new ReportBatcher();
    batcher.add(report, 1_000);
    batcher.sent("chatgpt:dom_fallback_used", 1_000);
    batcher.add(report, 2_000);
    const restarted = ReportBatcher.fromJSON(JSON.parse(JSON.stringify(batcher.toJSON())));
    restarted.add(report, 3_000);
    assert.deepEqual(restarted.due(30_000), []);
    assert.equal(restarted.due(1_000 + REPORT_INTERVAL_MS)[0].frame.count, 2);
  });

  it("ignores kinds and platforms that are not names", () => {
    const batcher = new ReportBatcher();
    batcher.add({ ...report, kind: "the answer text" }, 1);
    batcher.add({ ...report, platform: "a sentence" }, 1);
    assert.deepEqual(batcher.due(1), []);
  });
});

/** A seeded random source (mulberry32): the same cases every run, a failure reproducible. */
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A stream of random shape whose every value carries the canary: SSE
 * events and data, JSON objects and arrays nested, length-prefixed frames,
 * plain lines, the known shapes' own keys among made-up ones, and real
 * fixtures with the canary spliced into them.
 */
function randomStream(rand, canary, fixtures) {
  const pick = (items) => items[Math.floor(rand() * items.length)];
  const keys = ["v", "o", "p", "type", "delta", "text", "message", "content", "parts", "completion", "error", "x_new", "candidates"];
  const value = (depth) => {
    const roll = rand();
    if (depth > 2 || roll < 0.4) return `${pick(["", "Sure: ", "```baa\n"])}${canary}${pick(["", " and more", "\n"])}`;
    if (roll < 0.7) return [value(depth + 1), canary, value(depth + 1)];
    return Object.fromEntries(Array.from({ length: 1 + Math.floor(rand() * 3) }, () => [pick(keys), value(depth + 1)]));
  };
  const pieces = [];
  for (let i = 0, n = 1 + Math.floor(rand() * 8); i < n; i++) {
    const json = JSON.stringify(value(0));
    pieces.push(
      pick([
        () => `event: ${pick(["delta", "message_start", "content_block_delta", "x_unknown"])}\ndata: ${json}\n\n`,
        () => `data: ${json}\n\n`,
        () => `${json.length + 2}\n${json}\n`,
        () => `${canary} said the page\n`,
        () => `event: ${canary} with words\n\n`,
        () => `data: ${canary}\n\n`,
        () => pick(fixtures).replaceAll(/"(text|v|completion)": ?"/g, `"$1": "${canary} `),
      ])(),
    );
  }
  return pieces.join("");
}

describe("no report can carry message text", () => {
  const fixtures = Object.fromEntries(
    ADAPTERS.map((adapter) => {
      const folder = new URL(`./fixtures/${adapter.name}/`, import.meta.url);
      return [adapter.name, readdirSync(folder).filter((name) => name.endsWith(".stream")).map((name) => readFileSync(new URL(name, folder), "utf8"))];
    }),
  );

  it("holds for random streams with secret canaries, through the real parsers, tracker and batcher", () => {
    const rand = random(35);
    let unrecognised = 0;
    for (let run = 0; run < 400; run++) {
      const adapter = ADAPTERS[run % ADAPTERS.length];
      const canary = `c${Math.floor(rand() * 1e9)}x${run}`;
      const batcher = new ReportBatcher();
      const timers = [];
      const tracker = new CaptureTracker({
        adapter,
        report: () => {},
        notice: (kind, detail) => batcher.add({ platform: adapter.name, adapter: adapter.version, kind, detail }, run),
        readDom: () => ({ text: `page shows ${canary}`, message_id: "" }),
        conversationId: () => "11111111-2222-4333-8444-555555555555",
        setTimer: (fn) => timers.push(fn),
        clearTimer: () => {},
      });
      tracker.generatingChanged(true);
      tracker.streamStarted(1, { url: `${REQUEST_URLS[adapter.name]}&q=${canary}`, body: `{"prompt": "${canary}"}`, pageUrl: `https://example.test/${canary}` });
      const stream = randomStream(rand, canary, fixtures[adapter.name]);
      for (let at = 0; at < stream.length; ) {
        const size = 1 + Math.floor(rand() * 200);
        tracker.streamChunk(1, stream.slice(at, at + size));
        at += size;
      }
      tracker.streamEnded(1, { status: 200, contentType: pick(rand, ["text/event-stream", "application/json", `text/${canary}`]) });
      tracker.generatingChanged(false);
      for (const fn of timers.splice(0)) fn();
      const frames = batcher.due(run + REPORT_INTERVAL_MS).map(({ frame }) => frame);
      if (frames.some((frame) => frame.kind === "stream_unrecognised")) unrecognised += 1;
      const sent = JSON.stringify(frames);
      assert.ok(!sent.includes(canary), `run ${run} (${adapter.name}) leaked its canary: ${sent}`);
    }
    assert.ok(unrecognised > 100, `only ${unrecognised} runs made a stream_unrecognised report`);
  });
});

function pick(rand, items) {
  return items[Math.floor(rand() * items.length)];
}

describe("streams that mix known and unknown events", () => {
  const unknown = 'event: x_future_event\ndata: {"type":"x_future_event","payload":"not the answer"}\n\n';

  for (const [platform, name] of [["claude", "answer_with_baa"], ["chatgpt", "v1_answer_with_baa"], ["chatgpt", "v1_every_patch_operation"]]) {
    it(`still yield the answer's text: ${platform}/${name} with unknown events between the known ones`, () => {
      const folder = new URL(`./fixtures/${platform}/`, import.meta.url);
      const stream = readFileSync(new URL(`${name}.stream`, folder), "utf8");
      const { request, capture } = JSON.parse(readFileSync(new URL(`${name}.expected.json`, folder), "utf8"));
      const mixed = stream.split("\n\n").join(`\n\n${unknown}`);
      const parser = ADAPTERS.find((adapter) => adapter.name === platform).createStreamParser(request);
      parser.feed(mixed);
      assert.deepEqual(parser.finish(), capture);
    });
  }

  it("an unknown shape gives a stream_unrecognised report and the page's text, never a wrong text", () => {
    const adapter = ADAPTERS.find((candidate) => candidate.name === "chatgpt");
    const notices = [];
    const reports = [];
    const timers = [];
    let shown = "An earlier answer.";
    const tracker = new CaptureTracker({
      adapter,
      report: (capture, method) => reports.push({ text: capture.text, method }),
      notice: (kind) => notices.push(kind),
      readDom: () => ({ text: shown, message_id: "" }),
      conversationId: () => "6750a3b2-9c4d-8000-a1b2-c3d4e5f60718",
      setTimer: (fn) => timers.push(fn),
      clearTimer: () => {},
    });
    tracker.generatingChanged(true);
    tracker.streamStarted(1, { url: REQUEST_URLS.chatgpt, body: null });
    tracker.streamChunk(1, 'event: x-turn-chunk\ndata: {"kind":"chunk","payload":"What the stream says"}\n\n'.repeat(3));
    tracker.streamEnded(1, { status: 200, contentType: "text/event-stream" });
    shown = "What the page shows.";
    tracker.generatingChanged(false);
    for (const fn of timers.splice(0)) fn();
    assert.deepEqual(notices, ["stream_unrecognised", "dom_fallback_used"]);
    assert.deepEqual(reports, [{ text: "What the page shows.", method: "dom" }]);
  });
});
