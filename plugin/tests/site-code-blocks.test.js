// Code blocks as each site renders them: a description's `answer.code`
// read by lib/markdown.js, on trees in the shapes AI Studio, Qwen, T3 Chat and Z.ai render
// (fixtures/sites/code-blocks.js), against the shipped descriptions' rules.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { siteAdapter } from "../adapters/site.js";
import { elementToMarkdown } from "../lib/markdown.js";
import { el, elementsUnder } from "./fake-dom.js";
import { aiStudioAnswer, qwenAnswer, t3ChatAnswer, zaiAnswer } from "./fixtures/sites/code-blocks.js";

const description = (name) => JSON.parse(readFileSync(new URL(`../sites/${name}.json`, import.meta.url), "utf8"));
const codeRule = (name) => siteAdapter(description(name)).dom.codeBlocks;

/**
 * Gives every element under `root` a querySelectorAll that answers the
 * selectors of `table` (selector -> which elements it matches), as a
 * browser would for those selectors: the matches inside that element.
 */
function selectable(root, table) {
  const all = elementsUnder(root);
  for (const node of all) {
    node.querySelectorAll = (selector) => {
      if (!Object.hasOwn(table, selector)) return [];
      const inside = elementsUnder(node).slice(1);
      return inside.filter((candidate) => table[selector](candidate));
    };
  }
  return root;
}

const hasClass = (name) => (node) => (node.getAttribute("class") ?? "").split(/\s+/).includes(name);
const isNamed = (name) => (node) => node.nodeName === name.toUpperCase();
const under = (ancestorTest, test) => (node) => {
  if (!test(node)) return false;
  for (let current = node.parentNode; current; current = current.parentNode) if (ancestorTest(current)) return true;
  return false;
};

/** What AI Studio's and Qwen's selectors match, the way the browser would. */
const SELECTORS = {
  "ms-code-block": isNamed("ms-code-block"),
  "mat-expansion-panel-header": isNamed("mat-expansion-panel-header"),
  "pre.qwen-markdown-code": (node) => isNamed("pre")(node) && hasClass("qwen-markdown-code")(node),
  ".qwen-markdown-code-header > div:first-child": (node) =>
    isNamed("div")(node) && Boolean(node.parentNode) && hasClass("qwen-markdown-code-header")(node.parentNode) &&
    node.parentNode.childNodes.find((child) => child.nodeType === 1) === node,
  ".view-lines .view-line": under(hasClass("view-lines"), hasClass("view-line")),
  ".cm-content .cm-line": under(hasClass("cm-content"), hasClass("cm-line")),
  ".qwen-markdown-code-header": hasClass("qwen-markdown-code-header"),
  ".line-numbers": hasClass("line-numbers"),
  "div:has(> pre.shiki)": (node) =>
    isNamed("div")(node) && node.childNodes.some((child) => child.nodeType === 1 && isNamed("pre")(child) && hasClass("shiki")(child)),
  ".font-mono": hasClass("font-mono"),
  button: isNamed("button"),
  'div[dir="ltr"]:has(.cm-content)': (node) =>
    isNamed("div")(node) && node.getAttribute("dir") === "ltr" && elementsUnder(node).slice(1).some(hasClass("cm-content")),
  ".copy-code-button": hasClass("copy-code-button"),
  ".run-code-button": hasClass("run-code-button"),
  ".save-code-button": hasClass("save-code-button"),
};

const ASK = ["echo", '{"step": 1}'];
const FENCE = '```baa\necho\n{"step": 1}\n```';

describe("code blocks by a site's rule", () => {
  it("reads AI Studio's ms-code-block: the language from data-test-language, the code from its pre code", () => {
    const answer = selectable(aiStudioAnswer("baa", ASK), SELECTORS);
    assert.equal(elementToMarkdown(answer, { code: codeRule("aistudio") }), `Checking:\n\n${FENCE}`);
  });

  it("reads Qwen's Monaco block: the language from its header, one line per view line, no Copy, no line numbers", () => {
    const answer = selectable(qwenAnswer("baa", ASK), SELECTORS);
    assert.equal(elementToMarkdown(answer, { code: codeRule("qwen") }), `Checking:\n\n${FENCE}`);
  });

  it("gives Monaco's no-break spaces back as spaces", () => {
    const answer = selectable(qwenAnswer("baa", ["files.read", '{"path": "notes/todo.md"}']), SELECTORS);
    assert.match(elementToMarkdown(answer, { code: codeRule("qwen") }), /\{"path": "notes\/todo\.md"\}/);
  });

  it("reads Qwen's CodeMirror lines the same way", () => {
    const block = el(
      "pre",
      { class: "qwen-markdown-code" },
      el("div", { class: "qwen-markdown-code-header" }, el("div", {}, "baa"), el("div", {}, "Copy")),
      el("div", { class: "cm-content" }, ...ASK.map((line) => el("div", { class: "cm-line" }, line))),
    );
    const answer = selectable(el("div", {}, block), SELECTORS);
    assert.equal(elementToMarkdown(answer, { code: codeRule("qwen") }), FENCE);
  });

  it("reads T3 Chat's pre.shiki: the language from the .font-mono label beside it, the code from its code, no Copy", () => {
    const answer = selectable(t3ChatAnswer("baa", ASK), SELECTORS);
    assert.equal(elementToMarkdown(answer, { code: codeRule("t3chat") }), `Checking:\n\n${FENCE}`);
  });

  it("reads Z.ai's Open WebUI block: the language from its language-* class, one line per CodeMirror line, no label or Copy", () => {
    const answer = selectable(zaiAnswer("baa", ASK), SELECTORS);
    assert.equal(elementToMarkdown(answer, { code: codeRule("zai") }), `Checking:\n\n${FENCE}`);
  });

  it("without the rule the same page gives no baa fence: why the descriptions say how", () => {
    for (const answer of [qwenAnswer, aiStudioAnswer, t3ChatAnswer, zaiAnswer]) {
      const markdown = elementToMarkdown(answer("baa", ASK));
      assert.ok(!markdown.includes(FENCE), markdown);
    }
  });

  it("keeps the generic rules for a site that says nothing, and for other blocks", () => {
    const generic = el("div", {}, el("pre", {}, el("code", { class: "language-baa" }, ASK.join("\n"))));
    assert.equal(elementToMarkdown(selectable(generic, SELECTORS), { code: codeRule("aistudio") }), FENCE);
    assert.equal(elementToMarkdown(generic), FENCE);
    assert.equal(siteAdapter(description("perplexity")).dom.codeBlocks, null);
  });

  it("takes a language from a class prefix, and from a language-* class when the rule's place is empty", () => {
    const rule = { block: ["div.code"], language: { class_prefix: "lang-" } };
    const table = { "div.code": hasClass("code") };
    const block = (attributes, code) => selectable(el("section", {}, el("div", { class: "code", ...attributes }, code)), table);
    assert.equal(elementToMarkdown(block({}, el("code", { class: "x lang-BAA" }, "echo")), { code: rule }), "```baa\necho\n```");
    assert.equal(elementToMarkdown(block({}, el("code", { class: "language-baa" }, "echo")), { code: { ...rule, language: { attribute: "data-lang" } } }), "```baa\necho\n```");
  });

  it("treats a selector the page's engine refuses as matching nothing", () => {
    const answer = el("div", {}, el("pre", {}, el("code", { class: "language-baa" }, "echo")));
    answer.querySelectorAll = () => {
      throw new SyntaxError("not a selector");
    };
    assert.equal(elementToMarkdown(answer, { code: { block: ["div:::"] } }), "```baa\necho\n```");
  });
});
