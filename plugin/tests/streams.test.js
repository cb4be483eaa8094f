// Every recorded-shape stream under fixtures/<platform>/, fed the way the
// content script feeds it (bytes through one streaming TextDecoder) at
// several chunk sizes, must give the capture beside it, and say it stopped
// early (`incomplete`) exactly where the fixture says so.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { adapterByName } from "../adapters/index.js";
import { parseFully } from "./feed.js";

const FIXTURES = new URL("./fixtures/", import.meta.url);
const CHUNK_SIZES = [1, 2, 3, 7, 64, 1000, Infinity];

/** @returns {{platform: string, name: string, bytes: Uint8Array, expected: any}[]} */
function fixtures() {
  const found = [];
  for (const platform of readdirSync(FIXTURES, { withFileTypes: true })) {
    if (!platform.isDirectory()) continue;
    const folder = new URL(`${platform.name}/`, FIXTURES);
    for (const file of readdirSync(folder)) {
      if (!file.endsWith(".stream")) continue;
      const name = file.slice(0, -".stream".length);
      found.push({
        platform: platform.name,
        name,
        bytes: readFileSync(new URL(file, folder)),
        expected: JSON.parse(readFileSync(new URL(`${name}.expected.json`, folder), "utf8")),
      });
    }
  }
  return found;
}

const all = fixtures();

describe("recorded-shape streams", () => {
  it("has fixtures for every platform, with and without a capture", () => {
    for (const platform of ["claude", "chatgpt", "gemini"]) {
      const mine = all.filter((fixture) => fixture.platform === platform);
      assert.ok(mine.some((fixture) => fixture.expected.capture !== null), `${platform} has a fixture with a capture`);
      assert.ok(mine.some((fixture) => fixture.expected.capture === null), `${platform} has a fixture without one`);
      assert.ok(mine.some((fixture) => fixture.expected.incomplete), `${platform} has a fixture that stopped early`);
    }
  });

  for (const { platform, name, bytes, expected } of all) {
    for (const size of CHUNK_SIZES) {
      it(`${platform}/${name} in ${size}-byte chunks`, () => {
        const { capture, incomplete } = parseFully(adapterByName(platform), expected.request, bytes, size);
        assert.deepEqual(capture, expected.capture);
        assert.equal(incomplete, expected.incomplete ?? "");
      });
    }
  }
});

describe("gemini fixtures", () => {
  it("prefix each frame with its length: UTF-16 code units of \"\\n\" + JSON + \"\\n\"", () => {
    for (const { platform, name, bytes } of all.filter((fixture) => fixture.platform === "gemini")) {
      const lines = new TextDecoder().decode(bytes).split("\n");
      assert.equal(lines[0], ")]}'", name);
      for (let i = 2; i < lines.length - 1; i += 2) {
        assert.equal(Number(lines[i]), `\n${lines[i + 1]}\n`.length, `${platform}/${name} line ${i}`);
      }
    }
  });

  it("include characters outside the BMP, so a UTF-16 length differs from a code point count", () => {
    const text = new TextDecoder().decode(all.find((fixture) => fixture.name === "answer_with_baa_and_emoji").bytes);
    assert.notEqual([...text].length, text.length);
  });
});

describe("stream parsers on hostile input", () => {
  const garbage = [
    "",
    "data: {not json\n\n",
    "event: error\ndata: plain text\n\n",
    "data: []\n\ndata: null\n\ndata: 12\n\n",
    ")]}'\n\n5\n[[[[[\n",
    '[["wrb.fr",null,"[null,[1,2],null,null,[[null,[7],null,null,null,null,null,null,[2]]]]"]]',
    '[["wrb.fr",null,"not json"]]',
    'data: {"p":"/__proto__/polluted","o":"add","v":true}\n\n',
    'data: {"p":"","o":"add","v":{"message":{"__proto__":{"polluted":true}}}}\n\ndata: {"p":"/message/__proto__/x","o":"replace","v":1}\n\n',
    "data: [DONE]\n\n",
    "\r\r\n\n\r",
  ];
  for (const adapter of ["claude", "chatgpt", "gemini"].map(adapterByName)) {
    it(`${adapter.name}: never throws and captures nothing`, () => {
      for (const body of garbage) {
        const parser = adapter.createStreamParser({ requestUrl: "https://example.invalid/", requestBody: "{{{", pageUrl: "nonsense" });
        parser.feed(body);
        assert.equal(parser.finish(), null, JSON.stringify(body));
      }
      assert.equal({}.polluted, undefined);
    });
  }

  it("stay linear: a long stream fed one character at a time parses quickly", () => {
    const adapter = adapterByName("claude");
    const fixture = all.find((item) => item.platform === "claude" && item.name === "answer_with_baa");
    const delta = `event: content_block_delta\ndata: ${JSON.stringify({ type: "content_block_delta", index: 1, delta: { type: "text_delta", text: "x".repeat(200) } })}\n\n`;
    const text = new TextDecoder().decode(fixture.bytes);
    const cut = text.indexOf("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}");
    const body = text.slice(0, cut) + delta.repeat(1500) + text.slice(cut); // about 400 KB
    const parser = adapter.createStreamParser(fixture.expected.request);
    const started = performance.now();
    for (let i = 0; i < body.length; i++) parser.feed(body[i]);
    const capture = parser.finish();
    const elapsed = performance.now() - started;
    assert.equal(capture.text.length, fixture.expected.capture.text.length + 1500 * 200);
    assert.ok(elapsed < 5000, `took ${elapsed} ms`);
  });

  it("give up on a line longer than the bound instead of holding it", async () => {
    const { MAX_LINE_CHARS } = await import("../lib/stream-readers.js");
    const parser = adapterByName("chatgpt").createStreamParser({ requestUrl: "", requestBody: "" });
    const fixture = all.find((item) => item.platform === "chatgpt" && item.name === "v1_answer_with_baa");
    parser.feed(new TextDecoder().decode(fixture.bytes).replace("data: [DONE]", `data: ${"x".repeat(MAX_LINE_CHARS + 1)}\n\ndata: [DONE]`));
    assert.equal(parser.finish(), null);
  });

  it("read lines and frames up to their bound, whole or in pieces, and nothing after one longer", async () => {
    const { JsonFrameReader, LineReader } = await import("../lib/stream-readers.js");
    // [reader, chunks, what it reads with a bound of 5 characters, whether it gave up]
    const cases = [
      [LineReader, ["abcd\nab", "cd\r", "\nabcde\n"], ["abcd", "abcd", "abcde"], false],
      [LineReader, ["abc", "d"], ["abcd"], false],
      [LineReader, ["abc\nabcdef\nabc\n"], ["abc"], true],
      [LineReader, ["abc\nab", "cd", "ef", "\nabc\n"], ["abc"], true],
      [JsonFrameReader, [")]}'\n5\n[1,", "2]3\n{", "}[1,2"], ["[1,2]", "{}"], false],
      [JsonFrameReader, ["{}[1,2,3]{}"], ["{}"], true],
      [JsonFrameReader, ["[1,2", ",3,4", "]{}"], [], true],
    ];
    for (const [Reader, chunks, expected, overflowed] of cases) {
      const read = [];
      const reader = new Reader((item) => read.push(item), 5);
      for (const chunk of chunks) reader.feed(chunk);
      reader.end?.();
      assert.deepEqual(read, expected, `${Reader.name} ${JSON.stringify(chunks)}`);
      assert.equal(reader.overflowed, overflowed, `${Reader.name} ${JSON.stringify(chunks)}`);
    }
  });

  it("recognise their own shape in every fixture, and no other shape", () => {
    for (const fixture of all) {
      const parser = adapterByName(fixture.platform).createStreamParser(fixture.expected.request);
      parser.feed(new TextDecoder().decode(fixture.bytes));
      parser.finish();
      assert.equal(parser.isRecognised(), true, `${fixture.platform}/${fixture.name}`);
    }
    const strangers = ['data: {"kind": "a shape from next year"}\n\n', "<html><body>Sign in</body></html>", '{"ok": true}', ""];
    for (const name of ["claude", "chatgpt", "gemini"]) {
      for (const body of strangers) {
        const parser = adapterByName(name).createStreamParser({ requestUrl: "", requestBody: "" });
        parser.feed(body);
        assert.equal(parser.finish(), null);
        assert.equal(parser.isRecognised(), false, `${name}: ${JSON.stringify(body)}`);
      }
    }
  });
});
