/**
 * A `browser.dom_delivery` (SPEC §6): the text typed into the conversation's
 * composer the way the page's own editor takes input, sent, and confirmed by
 * the new user turn appearing in the page.
 *
 * The platform is only a selector table (`ComposerSelectors`, from each
 * adapter's `SELECTORS`); nothing here knows an app. The pure parts (text
 * comparison, the table walk, what the page shows before anything is typed)
 * are exported for `node --test`; `deliverThroughComposer` drives a real
 * page. `fillComposer` is its first half alone: the text put into the
 * composer the same way and not sent (the tool guide, which the person reads
 * and sends).
 *
 * Choices worth knowing:
 * - The text goes in with ONE `document.execCommand("insertText")` on the
 *   focused editor: the browser edits the DOM and fires trusted `input`
 *   events, which is what ProseMirror (ChatGPT, Claude) and Quill (Gemini)
 *   read their state from. Only when the editor's text does not match after
 *   that are a `beforeinput` (insertText, then insertFromPaste with a
 *   DataTransfer) and a `paste` event tried. The DOM is never written
 *   directly (innerHTML, value): an editor would not see it, and would send
 *   its own, empty, state.
 * - A composer that already holds text is a person's draft, unless that text
 *   is exactly the delivery (left by an earlier attempt that could not
 *   send): a draft is never sent along with a delivery nor destroyed; the
 *   delivery fails with "the composer holds a draft" and is retried later.
 * - Before typing, a last user turn that already holds the text means an
 *   earlier send whose answer was lost: it is answered ok with
 *   `already_sent`, not sent again.
 * - Texts are compared after `normaliseTurnText`: pages render whitespace
 *   differently (a <p> or a <div> per line, `innerText`'s blank lines
 *   between paragraphs, non-breaking spaces, runs of spaces collapsed where
 *   the page does not keep them), so the comparison ignores blank lines and
 *   how much whitespace there is, and nothing else: every other character,
 *   and where the lines break, must be the same.
 */

/**
 * @typedef {{composer: string[], sendButton?: string[], userTurn: string[],
 *   userTurnText?: string[], signedOut?: string[]}} ComposerSelectors
 *   Each list newest first, later entries fallbacks. `sendButton` empty or
 *   matching nothing: Enter is pressed in the composer. `userTurnText`: the
 *   element inside a user turn that holds its text (the turn itself when
 *   none matches). `signedOut`: what the page shows instead of a chat when
 *   the session is gone.
 *
 * @typedef {{ok: boolean, error: string | null, error_code: "blocked" | "selector_missing" | null,
 *   evidence: Record<string, boolean | string>}} DomResult
 */

/** A challenge page (Cloudflare's interstitials, as lib/proxy.js knows them from bodies). */
export const CHALLENGE_SELECTORS = Object.freeze([
  "#challenge-form",
  "#challenge-running",
  "#cf-challenge-running",
  'iframe[src*="challenges.cloudflare.com"]',
  'form[action*="__cf_chl"]',
]);

export const DEFAULT_TIMEOUT_MS = 30_000;
const MIN_TIMEOUT_MS = 1_000;
const MAX_TIMEOUT_MS = 120_000;
/** The composer may render late (an app still starting); past this share of the timeout the page has none. */
const COMPOSER_WAIT_SHARE = 1 / 3;
/**
 * After the text is in, how long a send button has to show up before Enter
 * is pressed instead (apps show theirs only once the editor holds text).
 */
const SEND_BUTTON_GRACE_MS = 500;
/** How long an editor may take to show a dispatched input in its DOM. */
const INPUT_SETTLE_MS = 300;
/** Polling interval beside the MutationObserver (attributes such as `disabled` on a node not yet observed). */
const POLL_MS = 50;

/**
 * `timeout_ms` from a frame, bounded: a missing or absurd value gets the
 * default, a huge one the maximum (a delivery must never hold a tab for long).
 *
 * @param {unknown} timeoutMs
 * @returns {number}
 */
export function clampTimeout(timeoutMs) {
  if (typeof timeoutMs !== "number" || !Number.isFinite(timeoutMs) || timeoutMs <= 0) return DEFAULT_TIMEOUT_MS;
  return Math.min(MAX_TIMEOUT_MS, Math.max(MIN_TIMEOUT_MS, Math.floor(timeoutMs)));
}

/**
 * The text as compared: `\r\n` and `\r` as `\n`; in each line, runs of
 * spaces, tabs and non-breaking spaces as one space, and the line trimmed;
 * blank lines dropped. Every other character is kept.
 *
 * @param {string} text
 * @returns {string}
 */
export function normaliseTurnText(text) {
  return String(text)
    .replace(/\r\n?/g, "\n")
    .split("\n")
    .map((line) => line.replace(/[ \t\u00a0]+/g, " ").trim())
    .filter((line) => line !== "")
    .join("\n");
}

/** Do two texts read the same once normalised (`normaliseTurnText`)? */
export function isSameTurnText(shown, delivered) {
  return normaliseTurnText(shown) === normaliseTurnText(delivered);
}

/**
 * The elements of the first selector in `selectors` that matches any.
 *
 * @param {ParentNode} root
 * @param {readonly string[] | undefined} selectors
 * @returns {Element[]}
 */
export function matchFirst(root, selectors) {
  for (const selector of selectors ?? []) {
    const found = root.querySelectorAll(selector);
    if (found.length) return [...found];
  }
  return [];
}

/**
 * The text an element shows: a form field's value, else `innerText` (line
 * breaks as rendered), else `textContent` (a DOM without layout).
 *
 * @param {any} element
 * @returns {string}
 */
export function shownText(element) {
  if (!element) return "";
  if (element.nodeName === "TEXTAREA" || element.nodeName === "INPUT") return String(element.value ?? "");
  return String(element.innerText ?? element.textContent ?? "");
}

/**
 * The text a user turn shows (its `userTurnText` element's, else its own).
 * Read only for the turns compared: a long conversation's turns are long.
 *
 * @param {Element} turn
 * @param {ComposerSelectors} table
 */
export function turnText(turn, table) {
  return shownText(matchFirst(turn, table.userTurnText)[0] ?? turn);
}

/**
 * What the composer shows before a text goes in without being sent
 * (`fillComposer`):
 * - `missing`: no composer (`isBlocked`: a challenge or sign-in page instead);
 * - `filled`: it holds exactly the text already;
 * - `draft`: it holds other text (a person's);
 * - `empty`: the text can go in.
 *
 * @param {ParentNode} root
 * @param {ComposerSelectors} table
 * @param {string} text
 * @returns {{state: "missing" | "filled" | "draft" | "empty", composer: Element | null, isBlocked: boolean}}
 */
export function fillState(root, table, text) {
  const composer = matchFirst(root, table.composer)[0] ?? null;
  if (!composer) {
    const isBlocked = matchFirst(root, CHALLENGE_SELECTORS).length > 0 || matchFirst(root, table.signedOut).length > 0;
    return { state: "missing", composer: null, isBlocked };
  }
  const current = normaliseTurnText(shownText(composer));
  if (current === "") return { state: "empty", composer, isBlocked: false };
  return { state: current === normaliseTurnText(text) ? "filled" : "draft", composer, isBlocked: false };
}

/**
 * What the page shows before anything is typed, and so what to do:
 * - `missing`: no composer (`isBlocked`: a challenge or sign-in page instead);
 * - `already_sent`: the last user turn holds the text;
 * - `draft`: the composer holds other text (a person's);
 * - `left_over`: the composer holds exactly the text (an earlier attempt's): send it;
 * - `empty`: type the text.
 *
 * @param {ParentNode} root
 * @param {ComposerSelectors} table
 * @param {string} text
 * @returns {{state: "missing" | "already_sent" | "draft" | "left_over" | "empty", composer: Element | null, isBlocked: boolean}}
 */
export function composerState(root, table, text) {
  const seen = fillState(root, table, text);
  if (seen.state === "missing") return { state: "missing", composer: null, isBlocked: seen.isBlocked };
  const last = matchFirst(root, table.userTurn).at(-1);
  if (last && isSameTurnText(turnText(last, table), text)) return { state: "already_sent", composer: seen.composer, isBlocked: false };
  return { ...seen, state: seen.state === "filled" ? "left_over" : seen.state };
}

/** Is a send button clickable (neither `disabled` nor `aria-disabled`)? */
export function isEnabled(button) {
  return Boolean(button) && !button.disabled && button.getAttribute?.("aria-disabled") !== "true";
}

/**
 * Waits a share of the time left for the page's composer (an app may still
 * be rendering it): resolves with `see()`'s answer once it shows a composer
 * or a blocked page, or with its last answer.
 *
 * @template {{state: string, isBlocked: boolean}} Seen
 * @param {() => Seen} see
 */
async function waitForComposer(see, waiter, deadline, now) {
  const composerDeadline = now() + (deadline - now()) * COMPOSER_WAIT_SHARE;
  const found = await waiter.until(() => {
    const seen = see();
    return seen.state !== "missing" || seen.isBlocked ? seen : null;
  }, composerDeadline);
  return found ?? see();
}

/** Why a page without a composer cannot take a text (see `fillState`). */
function missingComposer(seen, table) {
  return seen.isBlocked
    ? { error: "the page shows a sign-in or challenge page instead of the chat", error_code: /** @type {"blocked"} */ ("blocked") }
    : { error: `no composer on the page (looked for ${table.composer.join(", ")})`, error_code: /** @type {"selector_missing"} */ ("selector_missing") };
}

/**
 * @typedef {{ok: boolean, error: string | null, error_code: "blocked" | "selector_missing" | null,
 *   already_filled: boolean}} FillResult
 *   `ok`: the composer shows the text, which was not sent;
 *   `already_filled`: it showed it before (nothing typed).
 */

/**
 * Puts `text` into the page's empty composer the way a delivery types it,
 * and does NOT send it: the person reads it and sends it. A composer holding
 * other text (a person's draft) is left as it is and the fill fails; one
 * holding exactly the text already is left as it is and the fill succeeds.
 *
 * @param {{document: Document, table: ComposerSelectors, text: string, timeoutMs?: number, now?: () => number}} fill
 * @returns {Promise<FillResult>}
 */
export async function fillComposer({ document, table, text, timeoutMs, now = Date.now }) {
  const deadline = now() + clampTimeout(timeoutMs);
  const failed = ({ error, error_code = null }) => ({ ok: false, error, error_code, already_filled: false });
  const waiter = pageWaiter(document, now);
  try {
    const seen = await waitForComposer(() => fillState(document, table, text), waiter, deadline, now);
    if (seen.state === "missing") return failed(missingComposer(seen, table));
    if (seen.state === "filled") return { ok: true, error: null, error_code: null, already_filled: true };
    if (seen.state === "draft") return failed({ error: "the composer holds a draft: empty it first" });
    const composer = /** @type {HTMLElement} */ (seen.composer);
    focusAtEnd(document, composer);
    if (!(await insertText(document, composer, text, waiter, deadline, now))) {
      clearOwnText(document, composer, text);
      return failed({ error: "the composer did not take the text (execCommand, beforeinput and paste were tried)" });
    }
    return { ok: true, error: null, error_code: null, already_filled: false };
  } finally {
    waiter.stop();
  }
}

/**
 * Types `text` into the page's composer, sends it, and waits for the new
 * user turn. Every wait ends by `timeoutMs` (clamped); a failure after the
 * send was made says so in `evidence.submitted`.
 *
 * @param {{document: Document, table: ComposerSelectors, text: string, timeoutMs?: number, now?: () => number}} delivery
 * @returns {Promise<DomResult>}
 */
export async function deliverThroughComposer({ document, table, text, timeoutMs, now = Date.now }) {
  const deadline = now() + clampTimeout(timeoutMs);
  const failed = (error, evidence = {}, errorCode = null) => ({ ok: false, error, error_code: errorCode, evidence: { user_turn_seen: false, ...evidence } });
  const waiter = pageWaiter(document, now);
  try {
    const seen = await waitForComposer(() => composerState(document, table, text), waiter, deadline, now);
    if (seen.state === "missing") {
      const { error, error_code } = missingComposer(seen, table);
      return failed(error, {}, error_code);
    }
    if (seen.state === "already_sent") return { ok: true, error: null, error_code: null, evidence: { user_turn_seen: true, already_sent: true } };
    if (seen.state === "draft") return failed("the composer holds a draft");
    const composer = /** @type {HTMLElement} */ (seen.composer);
    const before = new Set(matchFirst(document, table.userTurn));

    focusAtEnd(document, composer);
    if (seen.state === "empty" && !(await insertText(document, composer, text, waiter, deadline, now))) {
      clearOwnText(document, composer, text);
      return failed("the composer did not take the text (execCommand, beforeinput and paste were tried)");
    }

    const isSubmitted = await submit(document, composer, table, waiter, deadline, now);
    if (!isSubmitted) {
      clearOwnText(document, composer, text);
      return failed("the send button stayed disabled");
    }
    const isSeen = await waiter.until(
      () => matchFirst(document, table.userTurn).some((turn) => !before.has(turn) && isSameTurnText(turnText(turn, table), text)),
      deadline,
    );
    if (!isSeen) return failed("no new user turn with the text appeared in time", { submitted: true });
    return { ok: true, error: null, error_code: null, evidence: { user_turn_seen: true } };
  } finally {
    waiter.stop();
  }
}

/**
 * `until(check, deadline)` resolves with `check()`'s first truthy value, or
 * null at the deadline; checks run on every change of the page and every
 * POLL_MS.
 */
function pageWaiter(document, now) {
  const watchers = new Set();
  const runAll = () => {
    for (const run of watchers) run();
  };
  const View = document.defaultView;
  const observer = View?.MutationObserver ? new View.MutationObserver(runAll) : null;
  observer?.observe(document.documentElement ?? document, { subtree: true, childList: true, attributes: true, characterData: true });
  const timer = setInterval(runAll, POLL_MS);
  return {
    /**
     * @template T
     * @param {() => T} check
     * @param {number} deadline
     * @returns {Promise<T | null>}
     */
    until(check, deadline) {
      return new Promise((resolve) => {
        const run = () => {
          const value = check();
          if (value) {
            watchers.delete(run);
            resolve(value);
          } else if (now() >= deadline) {
            watchers.delete(run);
            resolve(null);
          }
        };
        watchers.add(run);
        run();
      });
    },
    stop() {
      observer?.disconnect();
      clearInterval(timer);
      watchers.clear();
    },
  };
}

/** Focuses the composer with the caret after its content. */
function focusAtEnd(document, composer) {
  composer.focus();
  if (composer.nodeName === "TEXTAREA" || composer.nodeName === "INPUT") {
    const end = String(composer.value ?? "").length;
    composer.setSelectionRange?.(end, end);
    return;
  }
  const selection = document.getSelection();
  selection?.selectAllChildren(composer);
  selection?.collapseToEnd();
}

/**
 * Puts `text` into the empty composer through the editor's own input path,
 * trying the next way only when the editor's text does not match.
 *
 * @returns {Promise<boolean>} whether the composer now shows the text
 */
async function insertText(document, composer, text, waiter, deadline, now) {
  const View = document.defaultView;
  const shows = () => isSameTurnText(shownText(composer), text);
  const ways = [
    () => document.execCommand("insertText", false, text),
    () => composer.dispatchEvent(new View.InputEvent("beforeinput", { inputType: "insertText", data: text, bubbles: true, cancelable: true })),
    () => {
      const dataTransfer = new View.DataTransfer();
      dataTransfer.setData("text/plain", text);
      return composer.dispatchEvent(
        new View.InputEvent("beforeinput", { inputType: "insertFromPaste", dataTransfer, bubbles: true, cancelable: true }),
      );
    },
    () => {
      const clipboardData = new View.DataTransfer();
      clipboardData.setData("text/plain", text);
      return composer.dispatchEvent(new View.ClipboardEvent("paste", { clipboardData, bubbles: true, cancelable: true }));
    },
  ];
  for (const way of ways) {
    if (now() >= deadline) return false;
    // A way that half worked leaves text behind; the next starts from an empty editor.
    if (normaliseTurnText(shownText(composer)) !== "" && !clearComposer(document, composer)) return false;
    focusAtEnd(document, composer);
    way();
    if (await waiter.until(shows, Math.min(deadline, now() + INPUT_SETTLE_MS))) return true;
  }
  return false;
}

/** Empties the composer through the editor's own delete path. @returns {boolean} whether it is empty */
function clearComposer(document, composer) {
  composer.focus();
  if (composer.nodeName === "TEXTAREA" || composer.nodeName === "INPUT") composer.select();
  else document.getSelection()?.selectAllChildren(composer);
  document.execCommand("delete", false);
  return normaliseTurnText(shownText(composer)) === "";
}

/** Takes the delivery's text back out of the composer after a failure, so a person's next message does not carry it. */
function clearOwnText(document, composer, text) {
  if (isSameTurnText(shownText(composer), text)) clearComposer(document, composer);
}

/**
 * Clicks the send button once it is enabled, or presses Enter in the
 * composer when the page shows no send button.
 *
 * @returns {Promise<boolean>} false when a send button stayed disabled until the deadline
 */
async function submit(document, composer, table, waiter, deadline, now) {
  const buttons = () => matchFirst(document, table.sendButton);
  const hasButton = (table.sendButton?.length ?? 0) > 0 && (await waiter.until(() => buttons().length > 0, Math.min(deadline, now() + SEND_BUTTON_GRACE_MS)));
  if (!hasButton) {
    const View = document.defaultView;
    const init = { key: "Enter", code: "Enter", keyCode: 13, which: 13, bubbles: true, cancelable: true };
    composer.dispatchEvent(new View.KeyboardEvent("keydown", init));
    composer.dispatchEvent(new View.KeyboardEvent("keyup", init));
    return true;
  }
  const button = await waiter.until(() => buttons().find(isEnabled), deadline);
  if (!button) return false;
  button.click();
  return true;
}
