/** gemini.google.com's pages: its origin, the paths of its conversations and the elements read and written. */

import { pathMatch } from "../../lib/page-helpers.js";

export const ORIGIN = "https://gemini.google.com";
const CONVERSATION_PATH = /^(?:\/u\/\d+)?\/app\/([0-9a-fA-F]{8,64})\/?$/;

/**
 * The page's elements, newest first (later entries are fallbacks). The
 * composer's keys are lib/composer.js's `ComposerSelectors`.
 */
export const SELECTORS = {
  generating: ['mat-icon[data-mat-icon-name="stop"]', 'mat-icon[fonticon="stop"]'],
  assistantContent: ["model-response message-content .markdown", "model-response message-content", "model-response"],
  // A Quill editor inside the `rich-textarea` element (uncertain, 2025-26).
  composer: ['rich-textarea .ql-editor[contenteditable="true"]', 'rich-textarea [contenteditable="true"]'],
  // The send button is found by its icon's name, not its localised label;
  // when none shows, Enter sends, as it does in Gemini's composer.
  sendButton: ['button:has(mat-icon[data-mat-icon-name="send"])', 'button:has(mat-icon[fonticon="send"])'],
  userTurn: ["user-query"],
  userTurnText: [".query-text"],
  signedOut: ['a[href*="accounts.google.com/ServiceLogin"]'],
};

export function conversationIdFromUrl(url) {
  const hex = pathMatch(url, ORIGIN, CONVERSATION_PATH)?.[1];
  return hex ? `c_${hex.toLowerCase()}` : null;
}
