/** What a delivery to claude.ai needs: the request it makes, and the page values that fill it in. */

import { once, quietly, readValues, timeZone } from "../../lib/page-helpers.js";
import { at, text } from "../../lib/stream-readers.js";
import { decodedSegment } from "../../lib/delivery-rules.js";
import { conversationIdFromUrl, ORIGIN } from "./page.js";

/**
 * The one request a delivery makes (platforms/claude.py builds it): the
 * next turn of the conversation its path names. The organization is any one
 * segment (the page fills `{{page:org_uuid}}` in when the server does not know it).
 *
 * @type {import('../../lib/delivery-rules.js').DeliveryRule[]}
 */
export const DELIVERY_REQUESTS = [
  {
    method: "POST",
    path: /^\/api\/organizations\/[^/]+\/chat_conversations\/([^/]+)\/completion$/,
    query: [],
    headers: ["content-type", "accept", "anthropic-client-platform", "anthropic-device-id"],
    conversationOf: ({ path }) => decodedSegment(path[1]),
  },
];

/**
 * The organization whose chats this page shows: the `lastActiveOrg` cookie,
 * else the first membership that can chat from `/api/organizations` (ClewdR
 * picks the one whose capabilities include "chat").
 *
 * @param {import('../types.js').Page} page
 */
async function organizationId(page) {
  const cookie = text(await page.cookie("lastActiveOrg"));
  if (cookie) return cookie;
  const organizations = await page.fetchJson(`${ORIGIN}/api/organizations`);
  if (!Array.isArray(organizations)) return "";
  const chatting = organizations.find((org) => Array.isArray(org?.capabilities) && org.capabilities.includes("chat"));
  return text((chatting ?? organizations[0])?.uuid);
}

/**
 * The page values a delivery's `{{page:…}}` placeholders name, read from this page.
 *
 * @param {string[]} names
 * @param {import('../types.js').Page} page
 */
export async function readPageValues(names, page) {
  const org = once(() => organizationId(page));
  const conversation = () => Promise.resolve(conversationIdFromUrl(page.url) ?? "");
  return readValues(names, {
    org_uuid: org,
    conversation_uuid: conversation,
    // The branch's newest message (uncertain: PLATFORMS.md, one source).
    async parent_message_uuid() {
      const [orgId, conversationId] = [await org(), await conversation()];
      if (!orgId || !conversationId) return "";
      const url = `${ORIGIN}/api/organizations/${encodeURIComponent(orgId)}/chat_conversations/${encodeURIComponent(conversationId)}?tree=True&rendering_mode=messages`;
      return at(await page.fetchJson(url), "current_leaf_message_uuid");
    },
    async timezone() {
      return timeZone();
    },
    async locale() {
      return (await quietly(() => page.readGlobal("navigator.language"))) || page.readGlobal("document.documentElement.lang");
    },
    device_id: () => page.cookie("anthropic-device-id"),
  });
}
