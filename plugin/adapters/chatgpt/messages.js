/** What of a streamed message is the visible answer, and its text as a person reads it. */

import { at, isObject, parseJson, text } from "../../lib/stream-readers.js";

/**
 * Why a finished answer is not whole: `max_tokens` when its
 * `finish_details` say the length limit cut it (whatever its status),
 * `partial_completion` for any other `finished_partial_completion`; "" for
 * a whole one or one still being written.
 */
export function stoppedEarly(message) {
  const status = text(message.status);
  if (!status.startsWith("finished_")) return "";
  if (at(message, "metadata", "finish_details", "type") === "max_tokens") return "max_tokens";
  return status === "finished_partial_completion" ? "partial_completion" : "";
}

/**
 * The assistant's visible answer (not a tool call, a tool's output, hidden
 * reasoning, or a thinking preamble: channel `commentary` with
 * `metadata.is_thinking_preamble_message`, 2026-12-07).
 */
export function isAnswer(message) {
  if (!isObject(message) || at(message, "author", "role") !== "assistant") return false;
  if (at(message, "content", "content_type") !== "text") return false;
  if (at(message, "metadata", "is_thinking_preamble_message") === true) return false;
  const recipient = at(message, "recipient");
  const channel = at(message, "channel");
  return (recipient === undefined || recipient === "all") && (channel == null || channel === "final");
}

export function messageText(message) {
  const parts = at(message, "content", "parts");
  return Array.isArray(parts) ? parts.filter((part) => typeof part === "string").join("") : "";
}


/** A citation or entity reference: U+E200, fields separated by U+E202, U+E201. */
const REFERENCE = /\uE200([^\uE200\uE201]*)\uE201/g;
/** The private-use markers gpt4free strips wherever they are left (U+E200 to U+E206). */
const MARKERS = /[\uE200-\uE206]/g;

/**
 * The answer's text as a person reads it: a citation (`cite`, `turn0search0`)
 * is removed, as gpt4free does when it has no source list to link; an
 * entity reference shows its name (the second string of its JSON array);
 * markers left over are dropped. Applied to both captures.
 *
 * @param {string} value
 */
export function readableText(value) {
  if (!/[\uE200-\uE206]/.test(value)) return value;
  return value
    .replace(REFERENCE, (_whole, inside) => {
      const [kind, data] = inside.split("\uE202");
      if (kind === "entity" || kind === "product_entity") {
        const names = parseJson(data ?? "");
        if (Array.isArray(names) && typeof names[1] === "string") return names[1];
      }
      return "";
    })
    .replace(MARKERS, "");
}
