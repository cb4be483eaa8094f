/**
 * The tool guide: `guide.get` asked on the socket (never kept in the
 * outbox), and put into a tab's composer, not sent (the popup's "Insert
 * tool guide", and a new chat's page when the option is on).
 */

import { adapterByName, adapterForUrl, NETWORK_ADAPTERS } from "../adapters/index.js";
import { guideFromAnswer, guideGetFrame } from "../lib/guide.js";
import { ask } from "./questions.js";
import { ensureConnected, waitForHello } from "./socket.js";

/**
 * How long a new chat's page waits for a worker just woken (by that page's
 * message) to connect before its guide.get fails.
 */
const NEW_CHAT_CONNECT_MS = 5_000;

/**
 * Asks the server for the tool guide of a conversation (null: a new chat,
 * which gets its platform's guide). A question like any other (worker/questions.js):
 * it fails at once when not connected and after 10 s without an answer.
 *
 * @returns {Promise<{version: string, text: string}>}
 * @throws {Error} with a message to show the person
 */
async function requestGuide({ platform, conversationId }) {
  return guideFromAnswer(await ask((id) => guideGetFrame({ id, platform, conversationId })));
}

/**
 * The popup's "Insert tool guide": the guide of the conversation that tab
 * `tabId` shows, put into its composer and not sent.
 *
 * @returns {Promise<{ok: true, version: string, already_filled: boolean} | {ok: false, error: string}>}
 */
export async function insertGuideIntoTab(tabId) {
  const tab = await chrome.tabs.get(tabId).catch(() => null);
  // The tab's URL is readable for the adapters' origins only (host permissions).
  const adapter = tab?.url ? adapterForUrl(tab.url) : null;
  if (!adapter) {
    return { ok: false, error: `the active tab is not a chat page of ${NETWORK_ADAPTERS.map((known) => known.name).join(", ")} or of a site switched on in the options` };
  }
  let guide;
  try {
    guide = await requestGuide({ platform: adapter.name, conversationId: adapter.conversationIdFromUrl(tab.url) });
  } catch (error) {
    return { ok: false, error: error.message };
  }
  let filled;
  try {
    filled = await chrome.tabs.sendMessage(tabId, { type: "guide_fill", text: guide.text });
  } catch {
    return { ok: false, error: "the page has no Conductor script yet (open since before the plugin was installed?): reload the tab" };
  }
  if (!filled?.ok) return { ok: false, error: filled?.error ?? "the page did not answer" };
  return { ok: true, version: guide.version, already_filled: Boolean(filled.already_filled) };
}

/**
 * The guide for a new chat's page of `platform` (the "insert into every new
 * conversation" option), whose own URL is `pageUrl`. Refused for a page
 * showing a conversation: the option never touches an existing one.
 *
 * @returns {Promise<{ok: true, version: string, text: string} | {ok: false, error: string}>}
 */
export async function guideForNewChat(platform, pageUrl) {
  if (adapterForUrl(pageUrl)?.name !== platform) return { ok: false, error: "not a page of that platform" };
  if (adapterByName(platform).conversationIdFromUrl(pageUrl)) return { ok: false, error: "the page shows an existing conversation" };
  try {
    await ensureConnected();
    await waitForHello(NEW_CHAT_CONNECT_MS);
    return { ok: true, ...(await requestGuide({ platform, conversationId: null })) };
  } catch (error) {
    return { ok: false, error: error.message };
  }
}
