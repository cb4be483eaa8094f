/** What a delivery to gemini.google.com needs: the request it makes, and the page values that fill it in. */

import { readValues } from "../../lib/page-helpers.js";
import { chatMetadataOf, rememberedChatMetadata } from "./chat-metadata.js";
import { conversationIdFromUrl } from "./page.js";

/**
 * The one request a delivery makes (platforms/gemini.py builds it): the
 * send, under a second account's `/u/<n>` too; its conversation is the cid
 * of the chat metadata in its form body.
 *
 * @type {import('../../lib/delivery-rules.js').DeliveryRule[]}
 */
export const DELIVERY_REQUESTS = [
  {
    method: "POST",
    path: /^(?:\/u\/\d{1,3})?\/_\/BardChatUi\/data\/assistant\.lamda\.BardFrontendService\/StreamGenerate$/,
    query: ["bl", "f.sid", "hl", "_reqid", "rt"],
    headers: [
      "content-type",
      "x-same-domain",
      "x-goog-authuser",
      "x-goog-ext-525001261-jspb",
      "x-goog-ext-73010989-jspb",
      "x-goog-ext-525005358-jspb",
    ],
    conversationOf: ({ body }) => chatMetadataOf(body, 0) || null,
  },
];

/** @param {string} name a `WIZ_global_data` key */
function wizGlobal(page, name) {
  return () => page.readGlobal(`WIZ_global_data.${name}`);
}

// model_header is left out: model ids depend on the account's tier, and
// without the header Gemini uses the account's default model.
export async function readPageValues(names, page) {
  const metadata = () => rememberedChatMetadata(conversationIdFromUrl(page.url) ?? "");
  return readValues(names, {
    at_token: wizGlobal(page, "SNlM0e"),
    build_label: wizGlobal(page, "cfb2h"),
    session_id: wizGlobal(page, "FdrFJe"),
    language: wizGlobal(page, "TuX5cc"),
    "chat_metadata.cid": async () => metadata()?.cid,
    "chat_metadata.rid": async () => metadata()?.rid,
    "chat_metadata.rcid": async () => metadata()?.rcid,
    "chat_metadata.context_token": async () => metadata()?.context_token,
  });
}
