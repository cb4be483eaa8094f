/** The popup: the connection's state, the outbox, pause and reconnect, "Insert tool guide" and "Open side panel". */

import { guideOutcomeText } from "../lib/guide.js";
import { showStatus } from "./status.js";

const pause = document.getElementById("pause");

async function renderPause() {
  const { paused } = await chrome.storage.local.get("paused");
  pause.textContent = paused ? "Resume" : "Pause";
}

pause.addEventListener("click", async () => {
  const { paused } = await chrome.storage.local.get("paused");
  await chrome.storage.local.set({ paused: !paused });
  await renderPause();
});
document.getElementById("reconnect").addEventListener("click", () => chrome.runtime.sendMessage({ type: "popup.reconnect" }));
document.getElementById("options").addEventListener("click", () => chrome.runtime.openOptionsPage());

// The service worker does the work, so that it finishes even when the
// popup closes (the page taking focus); the popup shows how it went.
const insertGuide = /** @type {HTMLButtonElement} */ (document.getElementById("insert-guide"));
const guideOutcome = document.getElementById("guide-outcome");
insertGuide.addEventListener("click", async () => {
  insertGuide.disabled = true;
  guideOutcome.textContent = "Asking the server for the tool guide…";
  delete guideOutcome.dataset.ok;
  let outcome;
  try {
    const [tab] = await chrome.tabs.query({ active: true, currentWindow: true });
    outcome = tab?.id === undefined ? { ok: false, error: "no active tab" } : await chrome.runtime.sendMessage({ type: "popup.insert_guide", tab_id: tab.id });
  } catch (error) {
    outcome = { ok: false, error: error?.message ?? String(error) };
  } finally {
    insertGuide.disabled = false;
  }
  guideOutcome.textContent = guideOutcomeText(outcome);
  guideOutcome.dataset.ok = String(Boolean(outcome?.ok));
});

// The side panel opens only within the click's user gesture: the tab is
// looked up before, so that the click calls sidePanel.open at once.
let activeTabId = null;
chrome.tabs.query({ active: true, currentWindow: true }).then(([tab]) => {
  activeTabId = tab?.id ?? null;
});
/**
 * Opens the panel: Chrome's side panel for the active tab, or in Firefox
 * (which has no chrome.sidePanel) its sidebar, the manifest's sidebar_action
 * showing the same page, which follows the active tab.
 */
function openPanel() {
  const sidebarAction = globalThis.browser?.sidebarAction ?? chrome.sidebarAction;
  if (!chrome.sidePanel && sidebarAction) return sidebarAction.open();
  if (activeTabId === null) return Promise.reject(new Error("no active tab"));
  return chrome.sidePanel.open({ tabId: activeTabId });
}
document.getElementById("open-panel").addEventListener("click", () => {
  const opened = openPanel();
  opened.then(() => window.close(), (error) => {
    guideOutcome.textContent = `The side panel did not open: ${error?.message ?? error}.`;
    guideOutcome.dataset.ok = "false";
  });
});

renderPause();
showStatus(document);
