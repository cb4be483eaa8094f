/** claude.ai's pages: its origin, the paths of its conversations and the elements read and written. */

import { pathMatch } from "../../lib/page-helpers.js";

export const ORIGIN = "https://claude.ai";
const CONVERSATION_PATH = /^\/chat\/([0-9a-fA-F-]{36})\/?$/;

/** Selectors, newest first; each later one is a fallback for another version of the page. */
export const SELECTORS = {
  // While an answer is written its container says so (2025-26, uncertain);
  // the stop button's aria-label is English-only and comes last.
  generating: ['[data-is-streaming="true"]', 'button[aria-label="Stop response"]'],
  assistantContent: [
    '[data-is-streaming] .font-claude-response',
    '[data-is-streaming] .font-claude-message',
    ".font-claude-response",
    ".font-claude-message",
  ],
  // The composer is a ProseMirror editor; `data-testid="chat-input"` and the
  // submit button in its fieldset are uncertain (2025-26, no dated source in
  // PLATFORMS.md), the English aria-label is the last fallback.
  composer: ['[data-testid="chat-input"][contenteditable="true"]', 'fieldset div[contenteditable="true"].ProseMirror', 'div[contenteditable="true"].ProseMirror'],
  sendButton: ['fieldset button[type="submit"]', 'button[aria-label="Send message"]'],
  userTurn: ['[data-testid="user-message"]', ".font-user-message"],
  userTurnText: [],
  // claude.ai sends a signed-out browser to /login, which asks for an email (uncertain).
  signedOut: ['form input[type="email"]'],
};

export function conversationIdFromUrl(url) {
  return pathMatch(url, ORIGIN, CONVERSATION_PATH)?.[1].toLowerCase() ?? null;
}
