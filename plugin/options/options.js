/**
 * The options page: where a person pastes the server URL, client id and
 * token. The token is kept in chrome.storage.local and never shown again;
 * an empty token field keeps the saved one.
 *
 * The page shows one live status, the connection's (popup/status.js);
 * the line under the button says only what the form did, and clears as
 * soon as a field changes.
 */

import { isLoopback, socketUrl } from "../lib/frames.js";
import { showStatus } from "../popup/status.js";

const form = /** @type {HTMLFormElement} */ (document.getElementById("settings"));
const fields = {
  serverUrl: /** @type {HTMLInputElement} */ (document.getElementById("server-url")),
  clientId: /** @type {HTMLInputElement} */ (document.getElementById("client-id")),
  token: /** @type {HTMLInputElement} */ (document.getElementById("token")),
  readStreams: /** @type {HTMLInputElement} */ (document.getElementById("read-streams")),
  insertGuide: /** @type {HTMLInputElement} */ (document.getElementById("insert-guide")),
  reloadAfterDelivery: /** @type {HTMLInputElement} */ (document.getElementById("reload-after-delivery")),
};
const saved = document.getElementById("saved");

async function load() {
  const { settings } = await chrome.storage.local.get("settings");
  if (!settings) return;
  fields.serverUrl.value = settings.serverUrl ?? "";
  fields.clientId.value = settings.clientId ?? "";
  fields.readStreams.checked = settings.readStreams !== false;
  fields.insertGuide.checked = settings.insertGuide === true;
  fields.reloadAfterDelivery.checked = settings.reloadAfterDelivery === true;
  if (settings.token) fields.token.placeholder = "saved (paste a new token to replace it)";
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const serverUrl = fields.serverUrl.value.trim();
  if (!socketUrl(serverUrl)) {
    saved.textContent = "The server URL must start with http:// or https://.";
    return;
  }
  // Asked here, inside the click: Chrome grants permissions only on a user
  // gesture. The socket opens without it today; host access keeps a server
  // on another machine reachable where Chrome's Local Network Access rules
  // would otherwise ask. A refusal is not an error.
  if (!isLoopback(serverUrl)) {
    const origin = new URL(serverUrl).origin;
    await chrome.permissions.request({ origins: [`${origin}/*`] }).catch(() => false);
  }
  const { settings: previous } = await chrome.storage.local.get("settings");
  const token = fields.token.value.trim() || previous?.token || "";
  if (!token) {
    saved.textContent = "Paste the token printed by create_plugin_client.";
    return;
  }
  await chrome.storage.local.set({
    settings: {
      serverUrl,
      clientId: fields.clientId.value.trim(),
      token,
      readStreams: fields.readStreams.checked,
      insertGuide: fields.insertGuide.checked,
      reloadAfterDelivery: fields.reloadAfterDelivery.checked,
      savedAt: Date.now(),
    },
  });
  fields.token.value = "";
  fields.token.placeholder = "saved (paste a new token to replace it)";
  saved.textContent = "Saved.";
});
form.addEventListener("input", () => {
  saved.textContent = "";
});

load();
showStatus(document);
