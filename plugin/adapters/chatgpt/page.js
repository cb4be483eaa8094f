/** chatgpt.com's pages: its origin, the paths of its conversations and the elements read and written. */

import { pathMatch } from "../../lib/page-helpers.js";

export const ORIGIN = "https://chatgpt.com";
/** The continuation of a handed-off answer (PLATFORMS.md "Found since", 2026). */
export const RESUME_PATH = /^\/backend-(?:api|anon)\/f\/conversation\/resume\/?$/;
// "/c/<id>", also under a custom GPT: "/g/<gizmo>/c/<id>".
const CONVERSATION_PATH = /^(?:\/g\/[^/]+)?\/c\/([A-Za-z0-9-]{8,64})\/?$/;

/**
 * The page's elements, newest first (later entries are fallbacks). The
 * composer's keys are lib/composer.js's `ComposerSelectors`.
 */
export const SELECTORS = {
  generating: ['button[data-testid="stop-button"]'],
  assistantTurn: ['[data-message-author-role="assistant"]'],
  // The ProseMirror editor (chrome-ai-bridge, 2025-26); a hidden <textarea
  // name="prompt-textarea"> sits beside it, so the contenteditable comes first.
  composer: ['#prompt-textarea[contenteditable="true"]', 'div[contenteditable="true"].ProseMirror', "textarea#prompt-textarea"],
  sendButton: ['button[data-testid="send-button"]', "button#composer-submit-button"],
  userTurn: ['[data-message-author-role="user"]'],
  // The user's text as typed, without the turn's controls (uncertain, 2025).
  userTurnText: [".whitespace-pre-wrap"],
  signedOut: ['[data-testid="login-button"]'],
};

export function conversationIdFromUrl(url) {
  return pathMatch(url, ORIGIN, CONVERSATION_PATH)?.[1] ?? null;
}
