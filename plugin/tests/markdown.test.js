import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { elementToMarkdown } from "../lib/markdown.js";
import { el } from "./fake-dom.js";

const BAA = 'files.read\n{"path": "notes/todo.md", "note": "naïve \\"q\\" \\\\ ✓ 👍 `tick`"}';

describe("elementToMarkdown: code blocks", () => {
  const cases = [
    [
      "Claude: pre > code.language-baa, its label a sibling before pre",
      el("div", { class: "font-claude-response" },
        el("p", {}, "Reading it."),
        el("div", { class: "relative group/copy" },
          el("div", { class: "text-text-500 font-small" }, "baa"),
          el("div", {}, el("button", {}, "Copy")),
          el("pre", { class: "code-block__code" }, el("code", { class: "language-baa" }, BAA))),
        el("p", {}, "Done.")),
      `Reading it.\n\n\`\`\`baa\n${BAA}\n\`\`\`\n\nDone.`,
    ],
    [
      "ChatGPT: the header bar with the language and copy button inside pre does not leak",
      el("div", { class: "markdown prose" },
        el("pre", { class: "overflow-visible!" },
          el("div", { class: "contain-inline-size" },
            el("div", { class: "flex items-center" }, "baa", el("button", {}, "Copy code")),
            el("div", { class: "overflow-y-auto p-4" },
              el("code", { class: "whitespace-pre! language-baa" },
                el("span", {}, "files.read"), "\n", el("span", { class: "hljs-punctuation" }, BAA.split("\n")[1]), "\n"))))),
      `\`\`\`baa\n${BAA}\n\`\`\``,
    ],
    [
      "Gemini: code-block with a language label and a code without class",
      el("message-content", {},
        el("div", { class: "markdown markdown-main-panel" },
          el("p", {}, "Here:"),
          el("code-block", {},
            el("div", { class: "code-block" },
              el("div", { class: "code-block-decoration header-formatted" }, el("span", {}, "Baa"), el("div", { class: "buttons" }, el("button", {}, el("mat-icon", {}, "content_copy")))),
              el("div", { class: "formatted-code-block-internal-container" },
                el("pre", {}, el("code", { role: "text", "data-test-id": "code-content", class: "code-container formatted" }, BAA))))))),
      `Here:\n\n\`\`\`baa\n${BAA}\n\`\`\``,
    ],
    [
      "a code block without a language, lines broken by <br>, and a fence longer than a backtick run inside",
      el("div", {}, el("pre", {}, el("code", {}, "a", el("br"), "```", el("br"), "b"))),
      "````\na\n```\nb\n````",
    ],
    [
      "a code block inside a list item, indented under its marker",
      el("ol", {}, el("li", {}, el("p", {}, "Run:"), el("pre", {}, el("code", { class: "language-baa" }, "files.list\n\n{}")))),
      "1. Run:\n\n   ```baa\n   files.list\n\n   {}\n   ```",
    ],
  ];
  for (const [what, tree, expected] of cases) {
    it(what, () => assert.equal(elementToMarkdown(tree), expected));
  }

  it("keeps a baa block's content byte-exact, whitespace included", () => {
    const content = '  files.write\n{"path": "a b.md",\t"text": "line1\\nline2  "}  ';
    assert.equal(
      elementToMarkdown(el("div", {}, el("pre", {}, el("code", { class: "language-baa" }, content, "\n")))),
      `\`\`\`baa\n${content}\n\`\`\``,
    );
  });
});

describe("elementToMarkdown: text", () => {
  const cases = [
    ["paragraphs with collapsed whitespace", el("div", {}, el("p", {}, "  one\n   two "), "\n  ", el("p", {}, "three")), "one two\n\nthree"],
    ["headings", el("div", {}, el("h1", {}, "Title"), el("h3", {}, "Sub ", el("em", {}, "part"))), "# Title\n\n### Sub *part*"],
    [
      "emphasis, inline code, links",
      el("p", {}, el("strong", {}, "bold "), "and ", el("em", {}, "it"), ", ", el("code", {}, "x = `y`"), ", ", el("a", { href: "https://example.com/a b" }, "link"), ", ", el("del", {}, "gone")),
      "**bold** and *it*, `` x = `y` ``, [link](https://example.com/a%20b), ~~gone~~",
    ],
    [
      "nested lists and an ordered start",
      el("div", {},
        el("ul", {}, el("li", {}, "one", el("ul", {}, el("li", {}, "one.a"))), el("li", {}, "two")),
        el("ol", { start: "3" }, el("li", {}, "three"), el("li", {}, "four"))),
      "- one\n  - one.a\n- two\n\n3. three\n4. four",
    ],
    ["a quote", el("blockquote", {}, el("p", {}, "a"), el("p", {}, "b")), "> a\n>\n> b"],
    [
      "a table",
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "k"), el("th", {}, "v"))), el("tbody", {}, el("tr", {}, el("td", {}, "a|b"), el("td", {}, "1")))),
      "| k | v |\n| --- | --- |\n| a\\|b | 1 |",
    ],
    ["a line break inside a paragraph", el("p", {}, "a", el("br"), "b"), "a\nb"],
    ["buttons, icons and hidden elements left out", el("div", {}, el("p", {}, "kept"), el("button", {}, "Copy"), el("div", { hidden: "" }, "secret"), el("svg", {}, "x")), "kept"],
    ["inline runs between blocks become paragraphs", el("div", {}, "lead ", el("b", {}, "in"), el("p", {}, "para"), "tail"), "lead **in**\n\npara\n\ntail"],
  ];
  for (const [what, tree, expected] of cases) {
    it(what, () => assert.equal(elementToMarkdown(tree), expected));
  }

  it("does not exhaust the stack on a page-made deep tree", () => {
    let tree = el("span", {}, "deep");
    for (let i = 0; i < 20000; i++) tree = el(i % 2 ? "div" : "span", {}, tree);
    assert.equal(elementToMarkdown(el("div", {}, tree)), "deep");
  });
});
