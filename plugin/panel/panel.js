/**
 * The side panel (SPEC §9, "What happens in the chat, seen from the chat"):
 * the blocks of the conversation in the active tab, each with what became of
 * it, live, and why one that waits does; Pause / Resume for that
 * conversation, "Insert tool guide", and "Approve in Conductor" for a block
 * waiting for approval.
 *
 * It follows the active tab of its window (tab switches, and a tab moving to
 * another chat), or the tab `?tab=<id>` names (pinned: the panel opened in a
 * tab of its own, and the browser tests). For a chat tab it asks the worker
 * for `status.get`, then applies the `instruction.status` frames the worker
 * passes on (lib/panel.js), and asks again when the socket reconnects.
 * Nothing is drawn in the chat's own page.
 */

import { adapterForUrl, NETWORK_ADAPTERS } from "../adapters/index.js";
import { loadSites } from "../lib/site-descriptions.js";
import { noteFor, noteText } from "../lib/answer-notes.js";
import { guideOutcomeText } from "../lib/guide.js";
import { applyInstructionStatus, cleanText, countOf, panelStateOf, renderMessages, safeApproveUrl } from "../lib/panel.js";
import { showStatus } from "../popup/status.js";

const byId = (id) => document.getElementById(id);
const elements = {
  conversation: byId("conversation"),
  approvals: byId("approvals"),
  pause: /** @type {HTMLButtonElement} */ (byId("pause")),
  insertGuide: /** @type {HTMLButtonElement} */ (byId("insert-guide")),
  outcome: byId("outcome"),
  pausedNote: byId("paused-note"),
  answerNote: byId("answer-note"),
  notice: byId("notice"),
  empty: byId("empty"),
  messages: byId("messages"),
};

/** The tab `?tab=<id>` pins the panel to, or null to follow the active tab. */
const pinnedTabId = (() => {
  const value = new URLSearchParams(location.search).get("tab");
  return value !== null && /^\d+$/.test(value) ? Number(value) : null;
})();

/**
 * What the panel shows: the tab, its chat's platform and conversation id
 * (null: not a chat, or a new chat), the state once the status came, and
 * the paired server the approval links open on.
 *
 * @type {{tabId: number | null, platform: string | null, conversationId: string | null,
 *   state: import('../lib/panel.js').PanelState | null, serverUrl: string}}
 */
let view = { tabId: null, platform: null, conversationId: null, state: null, serverUrl: "" };
/** The notes on withdrawn answers the worker keeps (chrome.storage.session `answerNotes`). */
let answerNotes = [];
/** Counts the questions asked, so an answer to an older one is dropped. */
let question = 0;
/** The pushes that came while a `status.get` was on its way (null: none is). */
let pushesWhileAsking = null;

async function shownTab() {
  if (pinnedTabId !== null) return chrome.tabs.get(pinnedTabId).catch(() => null);
  const [tab] = await chrome.tabs.query({ active: true, currentWindow: true });
  return tab ?? null;
}

/** Looks at the tab again; a change of tab or conversation starts over with a new `status.get`. */
async function follow() {
  const tab = await shownTab();
  // A tab's URL is readable for the adapters' origins only (host permissions): any other is not a chat.
  const adapter = tab?.url ? adapterForUrl(tab.url) : null;
  const conversationId = adapter?.conversationIdFromUrl(tab.url) ?? null;
  const next = { tabId: tab?.id ?? null, platform: adapter?.name ?? null, conversationId };
  if (next.tabId === view.tabId && next.platform === view.platform && next.conversationId === view.conversationId) return;
  view = { ...next, state: null, serverUrl: view.serverUrl };
  elements.outcome.textContent = "";
  draw();
  if (conversationId) await load();
}

/** Asks for the conversation's status and draws it, with the pushes that came after the answer. */
async function load() {
  const { platform, conversationId } = view;
  const asked = ++question;
  pushesWhileAsking = [];
  let answer;
  try {
    answer = await chrome.runtime.sendMessage({ type: "panel.status", platform, conversation_id: conversationId });
  } catch (error) {
    answer = { ok: false, error: error?.message ?? String(error) };
  }
  if (asked !== question) return; // the tab moved on, or a newer question was asked
  const pushes = pushesWhileAsking;
  pushesWhileAsking = null;
  if (!answer?.ok) {
    view.state = null;
    draw(`Could not read this conversation's blocks: ${String(answer?.error ?? "the extension did not answer").replace(/\.+$/, "")}.`);
    return;
  }
  // The conversation asked about, whatever the answer says it is.
  let state = { ...panelStateOf(answer.status), platform, conversationId };
  for (const push of pushes) if (push.received > answer.received) state = applyInstructionStatus(state, push.frame);
  const isFirst = view.state === null;
  view.state = state;
  view.serverUrl = String(answer.server_url ?? "");
  draw();
  if (isFirst) elements.messages.lastElementChild?.lastElementChild?.scrollIntoView({ block: "end" });
}

/** Draws the view; `problem` says why there is nothing to show. */
function draw(problem = "") {
  const { platform, conversationId, state } = view;
  const platformLabel = platform ? platform[0].toUpperCase() + platform.slice(1) : "";
  const idText = document.createElement("span");
  idText.setAttribute("dir", "auto");
  idText.textContent = cleanText(conversationId ?? "", 80, { isOneLine: true });
  elements.conversation.replaceChildren(...(conversationId ? [`${platformLabel} conversation `, idText] : []));

  let notice = problem;
  if (!notice && !platform) {
    notice = `This tab is not a chat of ${NETWORK_ADAPTERS.map((adapter) => adapter.name).join(", ")} or of a site switched on in the options: open one to see its blocks here.`;
  }
  else if (!notice && !conversationId) notice = "A new chat: its blocks show here once its first answer is written.";
  else if (!notice && !state) notice = "Asking Conductor for this conversation's blocks…";
  elements.notice.textContent = notice;

  elements.insertGuide.disabled = !platform;
  elements.pause.disabled = !state;
  elements.pause.textContent = state?.paused ? "Resume" : "Pause";
  elements.pausedNote.hidden = !state?.paused;
  drawAnswerNote();
  elements.empty.hidden = !state || state.messages.length > 0;
  elements.messages.replaceChildren(...(state ? [renderMessages(document, state, { serverUrl: view.serverUrl })] : []));
}

/** The note on an answer of this conversation its app withdrew, if there is one. */
function drawAnswerNote() {
  const note = noteFor(answerNotes, view.platform, view.conversationId);
  elements.answerNote.hidden = !note;
  elements.answerNote.textContent = note ? noteText(note, new Date(note.at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })) : "";
}

async function showAnswerNotes() {
  ({ answerNotes } = await chrome.storage.session.get("answerNotes"));
  drawAnswerNote();
}

async function showApprovalsWaiting() {
  const { approvalsWaiting } = await chrome.storage.session.get("approvalsWaiting");
  const count = countOf(approvalsWaiting) ?? 0;
  elements.approvals.hidden = count === 0;
  elements.approvals.textContent = `${count} ${count === 1 ? "block waits" : "blocks wait"} for approval across your conversations.`;
}

function sayOutcome(text, isOk) {
  elements.outcome.textContent = text;
  elements.outcome.dataset.ok = String(isOk);
}

elements.pause.addEventListener("click", async () => {
  const { platform, conversationId, state } = view;
  if (!state) return;
  elements.pause.disabled = true;
  let answer;
  try {
    answer = await chrome.runtime.sendMessage({ type: "panel.pause", platform, conversation_id: conversationId, paused: !state.paused });
  } catch (error) {
    answer = { ok: false, error: error?.message ?? String(error) };
  }
  if (view.state && view.conversationId === conversationId && answer?.ok) view.state = { ...view.state, paused: answer.paused };
  draw();
  if (answer?.ok) sayOutcome(answer.paused ? "Paused: Conductor runs none of this conversation's blocks until you resume it." : "Resumed.", true);
  else sayOutcome(`Not changed: ${String(answer?.error ?? "the extension did not answer").replace(/\.+$/, "")}.`, false);
});

// The service worker does the work, as for the popup's button.
elements.insertGuide.addEventListener("click", async () => {
  if (view.tabId === null) return;
  elements.insertGuide.disabled = true;
  sayOutcome("Asking the server for the tool guide…", true);
  let outcome;
  try {
    outcome = await chrome.runtime.sendMessage({ type: "popup.insert_guide", tab_id: view.tabId });
  } catch (error) {
    outcome = { ok: false, error: error?.message ?? String(error) };
  }
  elements.insertGuide.disabled = !view.platform;
  sayOutcome(guideOutcomeText(outcome), Boolean(outcome?.ok));
});

// "Approve in Conductor", and "approve it" under a block held behind one: a tab of its own,
// on the paired server only (checked again here).
elements.messages.addEventListener("click", (event) => {
  const link = /** @type {Element} */ (event.target).closest?.("a.approve, a.approve-ahead");
  if (!link) return;
  event.preventDefault();
  const url = safeApproveUrl(link.getAttribute("href"), view.serverUrl);
  if (url) chrome.tabs.create({ url });
});

chrome.runtime.onMessage.addListener((message, sender) => {
  // From the service worker only: content scripts' messages reach extension pages too.
  if (sender.id !== chrome.runtime.id || sender.tab) return;
  if (message?.type === "worker.instruction_status") {
    if (pushesWhileAsking) pushesWhileAsking.push(message);
    else if (view.state) {
      const state = applyInstructionStatus(view.state, message.frame);
      if (state !== view.state) {
        view.state = state;
        draw();
      }
    }
  } else if (message?.type === "worker.connected" && view.conversationId) {
    load();
  }
});

chrome.tabs.onActivated.addListener(() => {
  if (pinnedTabId === null) follow();
});
chrome.tabs.onUpdated.addListener((tabId, change) => {
  if (tabId === view.tabId && ("url" in change || change.status === "complete")) follow();
});
chrome.tabs.onRemoved.addListener((tabId) => {
  if (tabId === view.tabId) follow();
});
chrome.storage.onChanged.addListener((changes, area) => {
  if (area === "session" && "approvalsWaiting" in changes) showApprovalsWaiting();
  if (area === "session" && "answerNotes" in changes) showAnswerNotes();
});

showStatus(document);
showApprovalsWaiting();
showAnswerNotes();
// The sites read from the page are chats too: their adapters first, then the tab.
loadSites()
  .catch((error) => console.warn("Conductor: the site descriptions could not be read:", error))
  .then(follow);
