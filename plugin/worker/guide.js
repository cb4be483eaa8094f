/**
 * The tool guide: `guide.get` asked on the socket (never kept in the
 * outbox), and put into a tab's composer, not sent (the popup's "Insert
 * tool guide", and a new chat's page when the option is on).
 */

import { ADAPTERS, adapterByName, adapterForUrl } from "../adapters/index.js";
import { guideFromAnswer, guideGetFrame, NotConnected, PendingAnswers } from "../lib/guide.js";
import { ensureConnected, send, waitForHello } from "./socket.js";
import { statusLine } from "./status.js";

/**
 * How long a new chat's page waits for a worker just woken (by that page's
 * message) to connect before its guide.get fails.
 */
const NEW_CHAT_CONNECT_MS = 5_000;

/**
 * Questions to the server waiting for their answer (`guide.get`). Kept in
 * this worker only: a question lives no longer than the socket it went out
 * on, and whoever asked is waiting for the answer in this worker's lifetime.
 */
export const answers = new PendingAnswers();

/**
 * Asks the server for the tool guide of a conversation (null: a new chat,
 * which gets its platform's guide). Not kept in the outbox: it fails at once
 * when not connected and after GUIDE_TIMEOUT_MS without an answer.
 *
 * @returns {Promise<{version: string, text: string}>}
 * @throws {Error} with a message to show the person
 */
async function requestGuide({ platform, conversationId }) {
  const id = crypto.randomUUID();
  let isSent = false;
  try {
    return guideFromAnswer(await answers.ask(id, () => (isSent = send(guideGetFrame({ id, platform, conversationId }))), "guide.get"));
  } catch (error) {
    if (isSent || !(error instanceof NotConnected)) throw error;
    // Not sent: say what the connection is doing, as the popup's state line does.
    const state = await statusLine();
    throw new NotConnected(`not connected to the Conductor server${state ? ` (${state})` : ""}`);
  }
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
  if (!adapter) return { ok: false, error: `the active tab is not a chat page of ${ADAPTERS.map((known) => known.name).join(", ")}` };
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
