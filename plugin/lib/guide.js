/**
 * The tool guide (SPEC §5.5, §6 `guide.get`): the frame that asks for it,
 * what its answer holds, and when the "insert into every new conversation"
 * option inserts it. It is asked as every question to the server is
 * (lib/answers.js).
 */

import { ServerRefused } from "./answers.js";

/** The server answered with an `error` frame, or with a `guide` frame missing its fields. */
export class GuideRefused extends ServerRefused {
  /** @param {string} code @param {string} detail */
  constructor(code, detail) {
    super(code, detail);
    this.name = "GuideRefused";
  }
}

/**
 * @param {{id: string, platform: string, conversationId?: string | null}} question
 *   `conversationId`: the platform's id of the conversation the page shows,
 *   null for a new chat (the server then answers the platform's guide)
 */
export function guideGetFrame({ id, platform, conversationId = null }) {
  return { type: "guide.get", id, platform, conversation_id: conversationId || null };
}

/**
 * The guide in a server's answer to `guide.get`.
 *
 * @param {any} frame a `guide` or `error` frame with the question's id
 * @returns {{version: string, text: string}}
 * @throws {GuideRefused} for an `error` frame or a guide without its text
 */
export function guideFromAnswer(frame) {
  if (frame?.type === "error") throw new GuideRefused(String(frame.code ?? "error"), String(frame.detail ?? ""));
  if (frame?.type !== "guide" || typeof frame.text !== "string" || frame.text.trim() === "" || typeof frame.version !== "string") {
    throw new GuideRefused("invalid", "its answer has no guide text and version");
  }
  return { version: frame.version, text: frame.text };
}

/**
 * What the popup says after "Insert tool guide".
 *
 * @param {{ok: boolean, version?: string, already_filled?: boolean, error?: string} | null | undefined} outcome
 *   the service worker's answer (null: it did not answer)
 */
export function guideOutcomeText(outcome) {
  if (outcome?.ok && outcome.already_filled) return `Tool guide ${outcome.version} is in the composer already: read it and send it.`;
  if (outcome?.ok) return `Tool guide ${outcome.version} inserted: read it and send it.`;
  const reason = String(outcome?.error || "the extension did not answer").replace(/\.+$/, "");
  return `The tool guide was not inserted: ${reason}.`;
}

/**
 * When the "insert the tool guide into every new conversation" option acts.
 *
 * A content script keeps one of these for its page and asks it at load and
 * whenever the page may have moved to another URL (the apps move between
 * chats without loading a page). The answer is yes only:
 * - with the option on;
 * - on a page with no conversation id in its URL (a new chat; an existing
 *   conversation never gets it);
 * - the first time the page is seen at that URL: a person who empties the
 *   composer does not get it back; coming back to a new chat from a
 *   conversation ("New chat") is a new visit and gets it again.
 * Whether the composer is empty is the composer's own check when the text
 * goes in (`fillComposer` never writes over a draft), and a reload is a new
 * page (see plugin/README.md, "The tool guide").
 */
export class NewChatGuide {
  /** @type {string | null} */
  #lastUrl = null;

  /**
   * @param {{isEnabled: boolean, url: string, conversationId: string | null}} page
   * @returns {boolean} whether to insert the guide now
   */
  shouldInsert({ isEnabled, url, conversationId }) {
    const address = String(url).split("#")[0];
    const isNewVisit = address !== this.#lastUrl;
    this.#lastUrl = address;
    return Boolean(isEnabled) && isNewVisit && !conversationId;
  }
}
