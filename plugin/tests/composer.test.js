// The pure parts of a DOM delivery (lib/composer.js): how texts are compared,
// how a platform's selector table is walked, and what the page shows before
// anything is typed, on fake DOMs built with each adapter's own table.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ADAPTERS, adapterByName } from "../adapters/index.js";
import { clampTimeout, composerState, fillComposer, fillState, isEnabled, isSameTurnText, matchFirst, normaliseTurnText } from "../lib/composer.js";
import { el, fakeDocument } from "./fake-dom.js";

describe("clampTimeout", () => {
  const cases = [
    [30_000, 30_000],
    [10, 1_000],
    [10_000_000, 120_000],
    [2_500.7, 2_500],
    [undefined, 30_000],
    [0, 30_000],
    [-5, 30_000],
    [Number.NaN, 30_000],
    ["30000", 30_000],
  ];
  for (const [given, expected] of cases) {
    it(`${String(given)} -> ${expected}`, () => assert.equal(clampTimeout(given), expected));
  }
});

describe("normaliseTurnText", () => {
  it("drops blank lines, runs of whitespace and line-end differences only", () => {
    assert.equal(normaliseTurnText("  a\r\n\r\n\n  b\u00a0\u00a0c \t\rd  \n"), "a\nb c\nd");
  });

  const same = [
    ["one line per <p>, read by innerText", "```baa-result\n\n{}\n\n```", "```baa-result\n{}\n```"],
    ["non-breaking spaces from a contenteditable", "a\u00a0 b", "a  b"],
    ["a trailing newline", "results\n", "results"],
    ["unicode kept as it is", "🎉 中文 עברית", "🎉 中文 עברית"],
  ];
  for (const [name, shown, delivered] of same) {
    it(`reads the same: ${name}`, () => assert.equal(isSameTurnText(shown, delivered), true));
  }

  const different = [
    ["a line break moved", "a b", "a\nb"],
    ["a character changed", "```baa-result\n{}\n```", "```baa-result\n{ }\n```"],
    ["text cut short", "results", "results and more"],
    ["a different emoji", "🎉", "🎊"],
  ];
  for (const [name, shown, delivered] of different) {
    it(`differs: ${name}`, () => assert.equal(isSameTurnText(shown, delivered), false));
  }
});

describe("matchFirst", () => {
  it("takes every element of the first selector that matches, later ones being fallbacks", () => {
    const [a, b, c] = [el("div"), el("div"), el("div")];
    const document = fakeDocument({ ".new": [], ".old": [a, b], ".older": [c] });
    assert.deepEqual(matchFirst(document, [".new", ".old", ".older"]), [a, b]);
    assert.deepEqual(matchFirst(document, [".new"]), []);
    assert.deepEqual(matchFirst(document, undefined), []);
  });
});

describe("each adapter's selector table", () => {
  for (const adapter of ADAPTERS) {
    it(`${adapter.name} names its composer, send button and user turns by stable attributes first`, () => {
      const table = adapter.dom.selectors;
      for (const key of ["composer", "sendButton", "userTurn"]) {
        assert.ok(Array.isArray(table[key]) && table[key].length > 0, `${adapter.name}.${key}`);
        // A localised label may be a late fallback, never the first choice.
        assert.doesNotMatch(table[key][0], /aria-label/, `${adapter.name}.${key}`);
      }
    });
  }
});

/**
 * A page of `platform` built from its own table: `composer` the editor's
 * text (null: no composer), `turns` the user turns' texts, `extra` more
 * selector matches (a challenge, a sign-in link).
 */
function page(platform, { composer = "", turns = [], extra = {} } = {}) {
  const table = adapterByName(platform).dom.selectors;
  const matches = { ...extra };
  if (composer !== null) matches[table.composer[0]] = [el("div", { contenteditable: "true" }, composer)];
  const turnElements = turns.map((text) => {
    const inner = el("div", {}, text);
    return { turn: el("div", {}, inner), inner };
  });
  matches[table.userTurn[0]] = turnElements.map(({ turn }) => turn);
  if (table.userTurnText?.length) matches[table.userTurnText[0]] = turnElements.map(({ inner }) => inner);
  return { document: fakeDocument(matches), table };
}

describe("composerState", () => {
  const text = "```baa-result\n{\"ok\": true}\n```";

  for (const platform of ["claude", "chatgpt", "gemini"]) {
    it(`${platform}: an empty composer is typed into`, () => {
      const { document, table } = page(platform, { turns: ["an older question"] });
      const seen = composerState(document, table, text);
      assert.equal(seen.state, "empty");
      assert.ok(seen.composer);
    });

    it(`${platform}: the text in the last user turn was sent already`, () => {
      const { document, table } = page(platform, { turns: ["an older question", `${text}\n`] });
      assert.equal(composerState(document, table, text).state, "already_sent");
    });

    it(`${platform}: the text in an earlier user turn only is sent again`, () => {
      const { document, table } = page(platform, { turns: [text, "a newer question"] });
      assert.equal(composerState(document, table, text).state, "empty");
    });

    it(`${platform}: other text in the composer is a person's draft`, () => {
      const { document, table } = page(platform, { composer: "half a thought" });
      assert.equal(composerState(document, table, text).state, "draft");
    });

    it(`${platform}: the text itself in the composer is sent as it is`, () => {
      const { document, table } = page(platform, { composer: text });
      assert.equal(composerState(document, table, text).state, "left_over");
    });

    it(`${platform}: a page without a composer is missing it, and blocked behind a challenge`, () => {
      const bare = page(platform, { composer: null });
      assert.deepEqual(composerState(bare.document, bare.table, text), { state: "missing", composer: null, isBlocked: false });
      const challenged = page(platform, { composer: null, extra: { 'iframe[src*="challenges.cloudflare.com"]': [el("iframe")] } });
      assert.equal(composerState(challenged.document, challenged.table, text).isBlocked, true);
    });

    it(`${platform}: a page without a composer that shows its sign-in is blocked`, () => {
      const table = adapterByName(platform).dom.selectors;
      const signedOut = page(platform, { composer: null, extra: { [table.signedOut[0]]: [el("a")] } });
      assert.equal(composerState(signedOut.document, signedOut.table, text).isBlocked, true);
    });
  }
});

describe("fillState", () => {
  const guide = "# Tools\n\nWrite a ```baa block.";

  for (const platform of ["claude", "chatgpt", "gemini"]) {
    it(`${platform}: an empty composer takes the text, whatever the user turns show`, () => {
      const { document, table } = page(platform, { turns: [guide] });
      assert.equal(fillState(document, table, guide).state, "empty");
    });

    it(`${platform}: the text already in the composer is left there`, () => {
      const { document, table } = page(platform, { composer: `${guide}\n` });
      assert.equal(fillState(document, table, guide).state, "filled");
    });

    it(`${platform}: other text in the composer is a person's draft`, () => {
      const { document, table } = page(platform, { composer: "half a thought" });
      assert.equal(fillState(document, table, guide).state, "draft");
    });

    it(`${platform}: a page without a composer is missing it, and blocked behind its sign-in`, () => {
      const table = adapterByName(platform).dom.selectors;
      const bare = page(platform, { composer: null });
      assert.deepEqual(fillState(bare.document, bare.table, guide), { state: "missing", composer: null, isBlocked: false });
      const signedOut = page(platform, { composer: null, extra: { [table.signedOut[0]]: [el("a")] } });
      assert.equal(fillState(signedOut.document, signedOut.table, guide).isBlocked, true);
    });
  }
});

/**
 * A page with a <textarea> composer that takes `execCommand("insertText")`,
 * and a send button and Enter that count what would have been sent.
 */
function textareaPage({ value = "", hasComposer = true } = {}) {
  const sent = [];
  const composer = {
    nodeName: "TEXTAREA",
    value,
    focused: false,
    focus() {
      this.focused = true;
    },
    setSelectionRange() {},
    select() {},
    dispatchEvent(event) {
      if (event?.key === "Enter") sent.push(this.value);
      return true;
    },
  };
  const button = { disabled: false, getAttribute: () => null, click: () => sent.push(composer.value) };
  const matches = { "textarea#prompt": hasComposer ? [composer] : [], "button#send": [button], ".user-turn": [] };
  const document = {
    querySelectorAll: (selector) => matches[selector] ?? [],
    execCommand(command, _ui, text) {
      if (!composer.focused) return false;
      if (command === "insertText") composer.value += text;
      if (command === "delete") composer.value = "";
      return true;
    },
  };
  const table = { composer: ["textarea#prompt"], sendButton: ["button#send"], userTurn: [".user-turn"] };
  return { document, table, composer, sent };
}

describe("fillComposer", () => {
  const guide = "# Tools\n\n```baa\nfiles.list\n{}\n```";

  it("puts the text into an empty composer and sends nothing", async () => {
    const { document, table, composer, sent } = textareaPage();
    const result = await fillComposer({ document, table, text: guide, timeoutMs: 3_000 });
    assert.deepEqual(result, { ok: true, error: null, error_code: null, already_filled: false });
    assert.equal(composer.value, guide);
    assert.deepEqual(sent, [], "neither the send button clicked nor Enter pressed");
  });

  it("leaves a composer that shows the text already as it is", async () => {
    const { document, table, composer, sent } = textareaPage({ value: guide });
    const result = await fillComposer({ document, table, text: guide, timeoutMs: 3_000 });
    assert.equal(result.ok, true);
    assert.equal(result.already_filled, true);
    assert.equal(composer.value, guide);
    assert.deepEqual(sent, []);
  });

  it("never writes over a person's draft", async () => {
    const { document, table, composer, sent } = textareaPage({ value: "my own question" });
    const result = await fillComposer({ document, table, text: guide, timeoutMs: 3_000 });
    assert.deepEqual(result, { ok: false, error: "the composer holds a draft: empty it first", error_code: null, already_filled: false });
    assert.equal(composer.value, "my own question");
    assert.deepEqual(sent, []);
  });

  it("says which composer it looked for on a page without one, after waiting a third of the timeout", async () => {
    const { document, table } = textareaPage({ hasComposer: false });
    const started = Date.now();
    const result = await fillComposer({ document, table, text: guide, timeoutMs: 1_500 });
    assert.equal(result.ok, false);
    assert.equal(result.error, "no composer on the page (looked for textarea#prompt)");
    assert.ok(Date.now() - started >= 450, "waited for a composer still rendering");
  });
});

describe("isEnabled", () => {
  it("is false for a disabled or aria-disabled button", () => {
    assert.equal(isEnabled({ disabled: false, getAttribute: () => null }), true);
    assert.equal(isEnabled({ disabled: true, getAttribute: () => null }), false);
    assert.equal(isEnabled({ disabled: false, getAttribute: (name) => (name === "aria-disabled" ? "true" : null) }), false);
    assert.equal(isEnabled(null), false);
  });
});
