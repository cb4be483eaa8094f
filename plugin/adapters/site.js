/**
 * The generic page adapter (SPEC §9, "Platforms as data"): one adapter per
 * site description (plugin/sites/<name>.json, validated by
 * lib/site-description.js), with the interface of adapters/types.js, for
 * reading answers from the page and delivering through the composer only.
 *
 * - No stream is watched (`completionRequest` matches no URL) and no
 *   request is allowed (`deliveryRequests` is empty): capture is `dom`, so
 *   lib/capture.js reads the page once its "writing" signal went away and
 *   its grace period passed, the DOM fallback the other adapters have.
 * - "Writing" is the description's `streaming` selectors matching anywhere,
 *   or, when it lists `finished`, the newest turn not showing that marker yet;
 *   where the streaming signal is never seen for a turn, lib/turn-watch.js
 *   finishes it once its text stayed the same for a few seconds with its
 *   `finished` markers there (`dom.turnLook` gives it what the page shows).
 * - The answer is the newest turn's `text` element (the turn itself when none
 *   matches), which content/main.js turns into Markdown with lib/markdown.js,
 *   so ```baa fences come back exactly as with the other adapters; a site
 *   whose code blocks are built otherwise says how (`answer.code`, given to
 *   lib/markdown.js as `dom.codeBlocks`).
 * - The composer table is the one lib/composer.js drives for every adapter.
 *
 * A description is data: its selectors go to querySelectorAll and nowhere
 * else, its prefixes to startsWith; the id patterns are these two.
 */

import { anyMatches, conversationUrlFor, parseUrl, queryAllFirst, queryLast } from "../lib/page-helpers.js";
import { validSiteDescription } from "../lib/site-description.js";

/** The two kinds of conversation id a description may name (no regular expression comes from a description). */
const ID_PATTERNS = {
  uuid: /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/,
  token: /^[A-Za-z0-9._~-]{6,200}$/,
};
/** A pattern that matches no URL: these sites are read from the page only. */
const NO_STREAM = /(?!)/;

/**
 * The conversation id a site's page URL shows, or null: the path's segment
 * after one of its prefixes, or, where the description names a `query`
 * parameter (OpenRouter's `?room=`), that parameter on a page whose path is
 * one of its prefixes.
 *
 * @param {Readonly<Record<string, any>>} description a valid description
 * @param {string} url
 */
export function conversationIdFor(description, url) {
  const parsed = parseUrl(url);
  if (!parsed || !description.origins.includes(parsed.origin)) return null;
  const { path_prefixes, id, not_ids = [], query } = description.conversation;
  for (const prefix of path_prefixes) {
    let segment;
    if (query) {
      if (`${parsed.pathname.replace(/\/$/, "")}/` !== prefix) continue;
      segment = parsed.searchParams.get(query) ?? "";
    } else {
      if (!parsed.pathname.startsWith(prefix)) continue;
      segment = parsed.pathname.slice(prefix.length).replace(/\/$/, "");
    }
    if (!ID_PATTERNS[id].test(segment) || not_ids.includes(segment)) continue;
    return id === "uuid" ? segment.toLowerCase() : segment;
  }
  return null;
}

/** The page of conversation `id` on the site: its first origin and prefix, the id as the path's last segment or as the `query` parameter. */
export function conversationPageFor(description, id) {
  const { path_prefixes: [prefix], query } = description.conversation;
  const page = `${description.origins[0]}${query ? prefix.replace(/\/$/, "") : prefix}`;
  return query ? `${page}?${query}=${encodeURIComponent(id)}` : `${page}${encodeURIComponent(id)}`;
}

/** Does a page URL belong to the site's chat (its origins and, when listed, its `pages`)? */
export function isSitePage(description, url) {
  const parsed = parseUrl(url);
  if (!parsed || !description.origins.includes(parsed.origin)) return false;
  return !description.pages || description.pages.some((prefix) => `${parsed.pathname}/`.startsWith(prefix));
}

/** A stream parser for a stream that is never watched: it recognises nothing, so the page is read. */
function createStreamParser() {
  return {
    feed() {},
    finish: () => null,
    isRecognised: () => false,
    handoff: () => null,
    continues: () => null,
  };
}

/**
 * Is the element of the kind the description says its composer is? A
 * composer selector that matches another kind means the site changed.
 */
export function isComposerOfKind(element, kind) {
  if (!element) return false;
  if (kind === "textarea") return element.nodeName === "TEXTAREA";
  return element.getAttribute?.("contenteditable") === "true";
}

/**
 * The adapter for one site description.
 *
 * @param {unknown} value the description (validated here; throws InvalidSiteDescription)
 * @returns {import('./types.js').Adapter & {description: Readonly<Record<string, any>>,
 *   dom: import('./types.js').Adapter["dom"] & {composerKind: string, missingSelectors(document: Document): string[]}}}
 */
export function siteAdapter(value) {
  const description = validSiteDescription(value);
  const { answer, composer, delivered } = description;
  /** The composer table of lib/composer.js, and the answer's selectors beside it. */
  const selectors = Object.freeze({
    composer: [...composer.input],
    sendButton: [...composer.send],
    userTurn: [...delivered.user_turn],
    userTurnText: [...(delivered.user_turn_text ?? [])],
    signedOut: [...(composer.signed_out ?? [])],
    generating: [...answer.streaming],
    assistantTurn: [...answer.turn],
    assistantText: [...(answer.text ?? [])],
    finished: [...(answer.finished ?? [])],
  });
  const newestTurn = (document) => queryLast(document, selectors.assistantTurn);
  const isGenerating = (document) => {
    if (anyMatches(document, selectors.generating)) return true;
    if (!selectors.finished.length) return false;
    const turn = newestTurn(document);
    return Boolean(turn) && queryAllFirst(turn, selectors.finished).length === 0;
  };
  const conversationIdFromUrl = (url) => conversationIdFor(description, url);
  const ownPage = (id) => conversationPageFor(description, id);
  return {
    name: description.name,
    version: description.version,
    origins: [...description.origins],
    description,
    conversationIdFromUrl,
    conversationUrl: conversationUrlFor(conversationIdFromUrl, ownPage),
    completionRequest: { method: "POST", pattern: NO_STREAM },
    deliveryRequests: [],
    createStreamParser,
    dom: {
      isGenerating,
      /** The newest turn's answer, or null while it is still being written (never a partial answer). */
      lastAssistantMessage(document) {
        if (isGenerating(document)) return null;
        const turn = newestTurn(document);
        if (!turn) return null;
        return queryAllFirst(turn, selectors.assistantText)[0] ?? turn;
      },
      messageId: () => null,
      selectors,
      /** How the site renders a code block (lib/markdown.js's `code` option), or null for the generic rules. */
      codeBlocks: answer.code ?? null,
      composerKind: composer.kind,
      /**
       * What lib/turn-watch.js needs to tell a finished answer: the
       * streaming selectors matching, the newest turn and its text, and
       * whether it shows its `finished` markers (true when none are listed).
       *
       * @returns {import('../lib/turn-watch.js').PageLook}
       */
      turnLook(document) {
        const turn = newestTurn(document);
        return {
          isStreaming: anyMatches(document, selectors.generating),
          turn,
          text: turn?.textContent ?? "",
          isFinishedShown: !selectors.finished.length || (Boolean(turn) && queryAllFirst(turn, selectors.finished).length > 0),
        };
      },
      /**
       * The selector groups that match nothing on this page, for a
       * `selector_missing` adapter report (`detail.selectors`): `composer`
       * (no composer, or one of another kind) and `answer` (no assistant
       * turn while the conversation has user turns).
       */
      missingSelectors(document) {
        const missing = [];
        if (!isComposerOfKind(queryAllFirst(document, selectors.composer)[0], composer.kind)) missing.push("composer");
        if (!newestTurn(document) && queryAllFirst(document, selectors.userTurn).length) missing.push("answer");
        return missing;
      },
    },
    async readPageValues() {
      return {}; // no proxy delivery: no page value is ever needed
    },
  };
}
