/** What a delivery to chatgpt.com needs: the request it makes, and the page values that fill it in. */

import { once, readValues, timeZone } from "../../lib/page-helpers.js";
import { at, text } from "../../lib/stream-readers.js";
import { jsonBodyField } from "../../lib/delivery-rules.js";
import { conversationIdFromUrl, ORIGIN } from "./page.js";

/**
 * The one request a delivery makes (platforms/chatgpt.py builds it): the
 * send, whose JSON body names the conversation. The headers are the page's
 * own (its bearer token, the sentinel and conduit tokens, the `oai-*` ones).
 *
 * @type {import('../../lib/delivery-rules.js').DeliveryRule[]}
 */
export const DELIVERY_REQUESTS = [
  {
    method: "POST",
    path: /^\/backend-api\/f\/conversation$/,
    query: [],
    headers: [
      "content-type",
      "accept",
      "authorization",
      "openai-sentinel-chat-requirements-token",
      "openai-sentinel-chat-requirements-prepare-token",
      "openai-sentinel-proof-token",
      "openai-sentinel-turnstile-token",
      "x-conduit-token",
      "oai-device-id",
      "oai-language",
      "oai-client-version",
      "oai-client-build-number",
      "oai-session-id",
      "chatgpt-account-id",
    ],
    conversationOf: ({ body }) => jsonBodyField(body, "conversation_id"),
  },
];

// The sentinel (chat-requirements token, proof of work, Turnstile) and
// conduit tokens are made by the page's own scripts right before it sends;
// the plugin cannot produce them, so they are left out and the server's
// optional headers that carry them are dropped. So are the client version,
// build number, session id and workspace account id: no dated source says
// where the page keeps them, and a wrong one is worse than none.
export async function readPageValues(names, page) {
  const session = once(() => page.fetchJson(`${ORIGIN}/api/auth/session`));
  const accessToken = once(async () => text(at(await session(), "accessToken")));
  const conversation = () => Promise.resolve(conversationIdFromUrl(page.url) ?? "");
  return readValues(names, {
    access_token: accessToken,
    conversation_id: conversation,
    async parent_message_id() {
      const [token, conversationId] = [await accessToken(), await conversation()];
      if (!token || !conversationId) return "";
      const data = await page.fetchJson(`${ORIGIN}/backend-api/conversation/${encodeURIComponent(conversationId)}`, {
        headers: { Authorization: `Bearer ${token}` },
      });
      return at(data, "current_node");
    },
    device_id: () => page.cookie("oai-did"),
    language: () => page.readGlobal("navigator.language"),
    async timezone() {
      return timeZone();
    },
  });
}
