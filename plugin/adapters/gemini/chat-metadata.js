/** The chat metadata a StreamGenerate request carries, and the last one of each conversation this page saw. */

import { at, MAX_REQUEST_BODY_CHARS, parseJson, text } from "../../lib/stream-readers.js";

/** Conversations whose last chat metadata this page remembers. */
const REMEMBERED_CHATS = 32;

/**
 * The chat metadata of each conversation's last finished stream on this page,
 * by cid: `{{page:chat_metadata.*}}` for the next delivery. Lives as long as
 * the page's content script (one module instance per tab), which is exactly
 * as long as the page itself would remember them.
 *
 * @type {Map<string, {cid: string, rid: string, rcid: string, context_token: string}>}
 */
const chatMetadata = new Map();

export function rememberChatMetadata(metadata) {
  chatMetadata.delete(metadata.cid);
  chatMetadata.set(metadata.cid, metadata);
  if (chatMetadata.size > REMEMBERED_CHATS) chatMetadata.delete(chatMetadata.keys().next().value);
}

/** The chat metadata of the conversation `cid`'s last finished stream on this page, if any. */
export function rememberedChatMetadata(cid) {
  return chatMetadata.get(cid);
}

/**
 * One slot of the chat metadata a StreamGenerate form body carries (f.req's
 * inner [2]): 0 the conversation (cid), 1 the rid it was sent under (the
 * parent). Anything unexpected gives "".
 */
export function chatMetadataOf(requestBody, slot) {
  if (typeof requestBody !== "string" || requestBody.length > MAX_REQUEST_BODY_CHARS) return "";
  try {
    const outer = parseJson(new URLSearchParams(requestBody).get("f.req") ?? "");
    return text(at(parseJson(at(outer, 1)), 2, slot));
  } catch {
    return "";
  }
}

export function parentFromRequest(requestBody) {
  return chatMetadataOf(requestBody, 1);
}
