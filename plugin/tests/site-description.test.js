// Site descriptions (plugin/sites/*.json) against lib/site-description.js
// and, for every fixture, a real JSON Schema implementation (Ajv, installed
// by make install with tests/mcp_servers' npm ci) reading plugin/sites/schema.json:
// both must agree on what is valid.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, it } from "node:test";

import { siteDescriptionProblems, validSiteDescription } from "../lib/site-description.js";
import { SITE_NAMES } from "../sites/index.js";

const sitesUrl = new URL("../sites/", import.meta.url);
const read = (name) => JSON.parse(readFileSync(new URL(`${name}.json`, sitesUrl), "utf8"));
const require = createRequire(new URL("../../tests/mcp_servers/package.json", import.meta.url));
const Ajv2020 = require("ajv/dist/2020").default;
const schemaValidate = new Ajv2020({ strict: true, allErrors: true }).compile(read("schema"));

const base = () => read("deepseek");
/** [what, change to a valid description] — each must be refused by both. */
const HOSTILE = [
  ["an unknown top-level key", (d) => (d.script = "alert(1)")],
  ["an unknown key in a group", (d) => (d.answer.onload = "x")],
  ["a <script in a selector", (d) => (d.answer.turn = ["<script>alert(1)</script>"])],
  ["javascript: in a selector", (d) => (d.composer.send = ['a[href="JavaScript:alert(1)"]'])],
  ["an on…= attribute selector", (d) => (d.composer.input = ['textarea[onfocus="x"]'])],
  ["a bare on… attribute selector", (d) => (d.composer.input = ["div[ onclick ]"])],
  ["an over-long selector", (d) => (d.answer.turn = ["div".padEnd(301, "a")])],
  ["a URL where a selector belongs", (d) => (d.answer.streaming = ["https://evil.example/x.js"])],
  ["a protocol-relative URL as a selector", (d) => (d.answer.streaming = ["//evil.example/x.js"])],
  ["url( in a selector", (d) => (d.answer.streaming = ['div[style*="url(x)"]'])],
  ["rule braces in a selector", (d) => (d.answer.turn = ["div{color:red}"])],
  ["too many selectors", (d) => (d.answer.turn = Array.from({ length: 13 }, (_, i) => `.t${i}`))],
  ["an empty required list", (d) => (d.delivered.user_turn = [])],
  ["too many origins", (d) => (d.origins = ["https://a.test", "https://b.test", "https://c.test", "https://d.test", "https://e.test"])],
  ["an http origin", (d) => (d.origins = ["http://chat.deepseek.com"])],
  ["an origin with a path", (d) => (d.origins = ["https://chat.deepseek.com/a"])],
  ["a reserved name", (d) => (d.name = "chatgpt")],
  ["an origin of an adapter with network capture", (d) => (d.origins = ["https://chat.deepseek.com", "https://claude.ai"])],
  ["Gemini's origin", (d) => (d.origins = ["https://gemini.google.com"])],
  ["a bad name", (d) => (d.name = "Deep-Seek")],
  ["a name over 16 characters (the server's column)", (d) => (d.name = "a".padEnd(17, "b"))],
  ["another capture", (d) => (d.capture = "network")],
  ["another delivery", (d) => (d.delivery = ["proxy"])],
  ["a composer kind not in the list", (d) => (d.composer.kind = "quill")],
  ["an id kind not in the list (a regex)", (d) => (d.conversation.id = "(a+)+$")],
  ["a path prefix that is a pattern", (d) => (d.conversation.path_prefixes = ["/chat/.*"])],
  ["a date that is not one", (d) => (d.answer.checked = "2026-13-01")],
  ["a source that is a URL", (d) => (d.answer.sources = [{ repo: "a/b", path: "https://x.test/y", commit: "abcdef0" }])],
  ["a source with a function", (d) => (d.answer.sources = [{ repo: "a/b", path: "x.js", commit: "abcdef0", run: "f()" }])],
  ["markup in an uncertain note", (d) => (d.uncertain = ["<img src=x onerror=alert(1)>"])],
  ["a missing group", (d) => delete d.composer],
  ["a code rule without its block", (d) => (d.answer.code = { lines: [".line"] })],
  ["a code rule with an unknown key", (d) => (d.answer.code = { block: ["pre"], script: "x" })],
  ["a code language in two places", (d) => (d.answer.code = { block: ["pre"], language: { attribute: "data-lang", class_prefix: "lang-" } })],
  ["a code language in no place", (d) => (d.answer.code = { block: ["pre"], language: {} })],
  ["a code language attribute that is an event handler's shape", (d) => (d.answer.code = { block: ["pre"], language: { attribute: "on click" } })],
  ["a code class prefix that is a pattern", (d) => (d.answer.code = { block: ["pre"], language: { class_prefix: "lang-.*" } })],
  ["markup in a code line selector", (d) => (d.answer.code = { block: ["pre"], lines: ["<b>"] })],
];

describe("shipped site descriptions", () => {
  for (const name of SITE_NAMES) {
    it(`${name}.json is valid, named after its file, and dated by its newest group`, () => {
      const description = read(name);
      assert.deepEqual(siteDescriptionProblems(description), []);
      assert.ok(schemaValidate(description), JSON.stringify(schemaValidate.errors));
      assert.equal(description.name, name);
      const dates = ["conversation", "answer", "composer", "delivered"].map((group) => description[group].checked);
      assert.equal(description.version, dates.sort().at(-1));
      assert.ok(Object.isFrozen(validSiteDescription(description).answer.turn));
    });
  }
});

describe("hostile descriptions", () => {
  for (const [what, change] of HOSTILE) {
    it(`refuses ${what}, as the schema does`, () => {
      const description = base();
      change(description);
      assert.notDeepEqual(siteDescriptionProblems(description), [], "the plugin's validator accepted it");
      assert.equal(schemaValidate(description), false, "the JSON Schema accepted it");
      assert.throws(() => validSiteDescription(description), { name: "InvalidSiteDescription" });
    });
  }

  it("accepts what the schema accepts at the limits", () => {
    const description = base();
    description.answer.turn = Array.from({ length: 12 }, (_, i) => `.t${i}`.padEnd(300, "x"));
    description.composer.send = [];
    delete description.uncertain;
    description.name = "a".padEnd(16, "b");
    assert.deepEqual(siteDescriptionProblems(description), []);
    assert.ok(schemaValidate(description), JSON.stringify(schemaValidate.errors));
  });
});
