/**
 * The side panel's notes on answers the plugin did not send because their
 * app withdrew them (lib/finality.js's `withdrawn` verdict: ChatGPT's
 * moderation, Claude's refusal). The page shows such an answer gone or
 * paused, and nothing there says that Conductor ran none of its blocks; the
 * panel of that conversation does.
 *
 * The worker keeps the notes in chrome.storage.session (`answerNotes`), the
 * latest one per conversation, the newest MAX_NOTES; the panel shows its
 * conversation's. Pure: the time is passed in.
 */

import { saysOf, VERDICTS, verdictOf } from "./finality.js";

/** Conversations with a note, at most: the oldest goes first. */
export const MAX_NOTES = 20;
/** A conversation id longer than this is not noted (as the panel does not ask about one). */
const MAX_CONVERSATION_ID_CHARS = 200;

/** @typedef {{platform: string, conversation_id: string, reason: string, at: number}} AnswerNote */

/**
 * The note a content script's message asks for, checked: a withdrawn
 * answer's reason and a conversation id; null for anything else.
 *
 * @param {{platform?: unknown, conversation_id?: unknown, reason?: unknown}} message
 * @param {number} at when (ms)
 * @returns {AnswerNote | null}
 */
export function answerNoteOf({ platform, conversation_id: conversationId, reason }, at) {
  if (typeof platform !== "string" || !platform) return null;
  if (typeof conversationId !== "string" || !conversationId || conversationId.length > MAX_CONVERSATION_ID_CHARS) return null;
  if (verdictOf(reason) !== VERDICTS.WITHDRAWN) return null;
  return { platform, conversation_id: conversationId, reason: String(reason), at };
}

/**
 * @param {unknown} notes what storage held (anything: it is checked)
 * @param {AnswerNote} note
 * @returns {AnswerNote[]} the notes with `note` as its conversation's, newest last, at most MAX_NOTES
 */
export function withNote(notes, note) {
  const others = notesOf(notes).filter((kept) => !isOf(kept, note.platform, note.conversation_id));
  return [...others, note].slice(-MAX_NOTES);
}

/**
 * @param {unknown} notes what storage held
 * @returns {AnswerNote | null} the note of that conversation, if it has one
 */
export function noteFor(notes, platform, conversationId) {
  if (!platform || !conversationId) return null;
  return notesOf(notes).findLast((note) => isOf(note, platform, conversationId)) ?? null;
}

/**
 * What the panel says of a note.
 *
 * @param {AnswerNote} note
 * @param {string} time when it happened, as the panel shows a time
 */
export function noteText(note, time) {
  return `An answer here (${time}) was not sent to Conductor: ${saysOf(note.reason)}. None of its blocks runs.`;
}

/** @returns {AnswerNote[]} the well-formed notes of what storage held */
function notesOf(notes) {
  if (!Array.isArray(notes)) return [];
  return notes.filter((note) => answerNoteOf(note ?? {}, 0) !== null && Number.isFinite(note.at));
}

function isOf(note, platform, conversationId) {
  return note.platform === platform && note.conversation_id === conversationId;
}
