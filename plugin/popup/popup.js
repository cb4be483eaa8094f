/** The popup: the connection's state, the outbox, pause and reconnect. */

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

renderPause();
showStatus(document);
