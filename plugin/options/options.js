/**
 * The options page: where a person pastes the pairing code the server's
 * admin shows once ("Pair a browser"), or, under "Advanced", the server URL,
 * client id and token one by one. The token is kept in
 * chrome.storage.local and never shown again; an empty token field keeps the
 * saved one.
 *
 * A pasted code is read at once (lib/pairing.js): a code it cannot read
 * changes nothing and says why; a good one fills the fields, saves them (the
 * service worker then connects) and is cleared from the page. The pairing line
 * then says, in words, where the plugin is connected or why it is not; once
 * connected, the next step shows.
 *
 * Plain http to another machine is refused (lib/server-url.js) until the
 * box "I understand this is unencrypted" is ticked; the box shows when it
 * matters, and its tick is saved with the settings (the worker checks it too).
 *
 * The page shows one live status, the connection's (popup/status.js);
 * the line under the button says only what the form did, and clears as
 * soon as a field changes.
 */

import { isLoopback } from "../lib/frames.js";
import { matchPatterns } from "../lib/sites.js";
import { connectionOutcome, parsePairingCode } from "../lib/pairing.js";
import { isUnencrypted, NOT_HTTP, serverUrlProblem } from "../lib/server-url.js";
import { quietMsOf } from "../lib/turn-watch.js";
import { showStatus } from "../popup/status.js";
import { loadSites } from "../lib/site-descriptions.js";

const form = /** @type {HTMLFormElement} */ (document.getElementById("settings"));
const fields = {
  pairingCode: /** @type {HTMLInputElement} */ (document.getElementById("pairing-code")),
  serverUrl: /** @type {HTMLInputElement} */ (document.getElementById("server-url")),
  clientId: /** @type {HTMLInputElement} */ (document.getElementById("client-id")),
  token: /** @type {HTMLInputElement} */ (document.getElementById("token")),
  readStreams: /** @type {HTMLInputElement} */ (document.getElementById("read-streams")),
  insertGuide: /** @type {HTMLInputElement} */ (document.getElementById("insert-guide")),
  answerQuietSeconds: /** @type {HTMLInputElement} */ (document.getElementById("answer-quiet-seconds")),
  reloadAfterDelivery: /** @type {HTMLInputElement} */ (document.getElementById("reload-after-delivery")),
  unencrypted: /** @type {HTMLInputElement} */ (document.getElementById("unencrypted")),
};
const consent = document.getElementById("unencrypted-consent");

/** Shows the box when the URL is plain http to another machine, or it is ticked already. */
function showConsentFor(serverUrl) {
  if (isUnencrypted(serverUrl) || fields.unencrypted.checked) consent.hidden = false;
}
const saved = document.getElementById("saved");
const outcome = document.getElementById("pairing-outcome");
const warning = document.getElementById("pairing-warning");
const nextStep = document.getElementById("next-step");
/** Set from a pasted code's reading until the connection says more. */
let pairingError = "";

async function load() {
  const { settings } = await chrome.storage.local.get("settings");
  if (!settings) {
    // Nothing to see under "Advanced" yet: the pairing code is the way in.
    fields.pairingCode.focus();
    return;
  }
  fields.serverUrl.value = settings.serverUrl ?? "";
  fields.clientId.value = settings.clientId ?? "";
  fields.readStreams.checked = settings.readStreams !== false;
  fields.insertGuide.checked = settings.insertGuide === true;
  fields.answerQuietSeconds.value = String(quietMsOf(settings.answerQuietMs) / 1000);
  fields.reloadAfterDelivery.checked = settings.reloadAfterDelivery === true;
  fields.unencrypted.checked = settings.isUnencryptedAccepted === true;
  showConsentFor(fields.serverUrl.value);
  if (settings.token) fields.token.placeholder = "saved (paste a new token to replace it)";
}

/**
 * Saves the settings (the service worker reconnects on the change). Returns
 * what is wrong, or "" when saved.
 *
 * @param {{serverUrl: string, clientId: string, token: string}} pairing
 */
async function save({ serverUrl, clientId, token }) {
  const problem = serverUrlProblem(serverUrl, { isUnencryptedAccepted: fields.unencrypted.checked });
  if (problem) {
    showConsentFor(serverUrl);
    return problem;
  }
  // Asked here, inside the click or paste: Chrome grants permissions only on
  // a user gesture. The socket opens without it today; host access keeps a
  // server on another machine reachable where Chrome's Local Network Access
  // rules would otherwise ask. A refusal is not an error.
  if (!isLoopback(serverUrl)) {
    const origin = new URL(serverUrl).origin;
    await chrome.permissions.request({ origins: [`${origin}/*`] }).catch(() => false);
  }
  const { settings: previous } = await chrome.storage.local.get("settings");
  token = token || previous?.token || "";
  if (!token) return "Paste the pairing code, or the token printed by create_plugin_client.";
  await chrome.storage.local.set({
    settings: {
      serverUrl,
      clientId,
      token,
      readStreams: fields.readStreams.checked,
      insertGuide: fields.insertGuide.checked,
      answerQuietMs: quietMsOf(Number(fields.answerQuietSeconds.value) * 1000),
      reloadAfterDelivery: fields.reloadAfterDelivery.checked,
      // Kept only where it is needed, so a later switch to another plain-http server asks again.
      isUnencryptedAccepted: isUnencrypted(serverUrl) && fields.unencrypted.checked,
      savedAt: Date.now(),
    },
  });
  fields.serverUrl.value = serverUrl;
  fields.clientId.value = clientId;
  fields.token.value = "";
  fields.token.placeholder = "saved (paste a new token to replace it)";
  return "";
}

/** Reads the pairing field; pairs with a good code, says why a bad one is refused (nothing changes). */
async function pairFromCode() {
  const text = fields.pairingCode.value;
  warning.textContent = "";
  if (!text.trim()) {
    pairingError = "";
    return renderOutcome();
  }
  const result = parsePairingCode(text, { isUnencryptedAccepted: fields.unencrypted.checked });
  if (!result.ok) {
    // Plain http to another machine: the code stays, and is read again once the box is ticked.
    if (result.isUnencrypted) consent.hidden = false;
    pairingError = result.error;
    return renderOutcome();
  }
  // The code holds the token: it leaves the page as soon as it is read.
  fields.pairingCode.value = "";
  // Shown before saving, which may wait on Chrome's permission prompt.
  warning.textContent = result.warnings.join(" ");
  pairingError = await save(result.pairing);
  saved.textContent = pairingError ? "" : "Saved.";
  return renderOutcome();
}

async function renderOutcome() {
  if (pairingError) {
    outcome.textContent = pairingError;
    outcome.dataset.ok = "false";
    nextStep.hidden = true;
    return;
  }
  const { status = {} } = await chrome.storage.session.get("status");
  const { settings } = await chrome.storage.local.get("settings");
  const { text, isConnected } = connectionOutcome(status, settings);
  outcome.textContent = text;
  outcome.dataset.ok = String(isConnected);
  nextStep.hidden = !isConnected;
}

fields.pairingCode.addEventListener("input", () => {
  pairFromCode().catch((error) => {
    outcome.textContent = `The pairing code could not be saved: ${error}`;
  });
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  if (fields.pairingCode.value.trim()) {
    await pairFromCode();
    return;
  }
  pairingError = "";
  const problem = await save({
    serverUrl: fields.serverUrl.value.trim(),
    clientId: fields.clientId.value.trim(),
    token: fields.token.value.trim(),
  });
  saved.textContent = problem || "Saved.";
  if (problem === NOT_HTTP) document.getElementById("advanced").open = true;
});
fields.serverUrl.addEventListener("input", () => showConsentFor(fields.serverUrl.value.trim()));
fields.unencrypted.addEventListener("change", () => {
  if (fields.pairingCode.value.trim()) pairFromCode();
});
form.addEventListener("input", (event) => {
  saved.textContent = "";
  if (event.target !== fields.pairingCode) warning.textContent = "";
});

// "Notify me when a block waits for approval": its own key (`notifyApprovals`,
// not in `settings`, whose change reconnects), saved at once, and on only
// while Chrome grants the optional "notifications" permission, which is asked
// for here, inside the click (a user gesture), and given back when switched off.
const notifyApprovals = /** @type {HTMLInputElement} */ (document.getElementById("notify-approvals"));
const notifyOutcome = document.getElementById("notify-outcome");
const NOTIFICATIONS = { permissions: ["notifications"] };

async function loadNotifyApprovals() {
  const { notifyApprovals: isOn } = await chrome.storage.local.get("notifyApprovals");
  notifyApprovals.checked = isOn === true && (await chrome.permissions.contains(NOTIFICATIONS));
}

notifyApprovals.addEventListener("change", async () => {
  notifyOutcome.textContent = "";
  if (notifyApprovals.checked) {
    const isGranted = await chrome.permissions.request(NOTIFICATIONS).catch(() => false);
    notifyApprovals.checked = isGranted;
    await chrome.storage.local.set({ notifyApprovals: isGranted });
    notifyOutcome.textContent = isGranted
      ? "On: a notification says when a block starts waiting for approval."
      : "Off: Chrome did not allow notifications.";
  } else {
    await chrome.storage.local.set({ notifyApprovals: false });
    await chrome.permissions.remove(NOTIFICATIONS).catch(() => false);
    notifyOutcome.textContent = "Off.";
  }
});

// "Sites": each chat site read from the page, with a switch, the one thing
// that turns a site on (a grant in Chrome's own menu does not). On asks
// Chrome for the site's origins (optional host permissions) inside the
// click, then tells the worker, which keeps the switch in chrome.storage and
// registers the site's content script; off tells the worker first, then
// gives the origins back. The worker answers with the rows once its scripts
// match the switches (`options.sites`, `options.site_switch`,
// worker/site-sync.js), and with the descriptions it does not use (one that
// claims another site's origin or an adapter's), listed under the switches.
const siteList = document.getElementById("site-list");
const sitesNotUsed = document.getElementById("sites-not-used");
const sitesOutcome = document.getElementById("sites-outcome");
/** The descriptions shown, by name: a switch's origins are known before its click, so the request stays in the gesture. */
let knownSites = new Map();

/** Draws the rows and what is not used (text nodes only: titles, origins and problems may come from the server). */
function renderSites({ rows, notUsed }) {
  siteList.replaceChildren(
    ...rows.map((row) => {
      const item = document.createElement("li");
      const label = document.createElement("label");
      label.className = "inline";
      const input = document.createElement("input");
      input.type = "checkbox";
      input.dataset.site = row.name;
      input.checked = row.isOn;
      input.disabled = !row.isLoadable;
      const title = document.createElement("strong");
      title.textContent = row.title;
      label.append(input, " ", title, ` ${row.origins.join(", ")}`);
      if (!row.isLoadable) label.append(" (a site your server added: this version of the plugin cannot run there yet)");
      item.append(label);
      return item;
    }),
  );
  sitesNotUsed.replaceChildren(
    ...notUsed.map(({ name, problems }) => {
      const item = document.createElement("li");
      item.dataset.site = name;
      item.textContent = `Not used: the description of "${name}" (${problems[0]}).`;
      return item;
    }),
  );
}

async function loadSiteList() {
  knownSites = (await loadSites()).sites;
  renderSites(await chrome.runtime.sendMessage({ type: "options.sites" }));
}

siteList.addEventListener("change", async (event) => {
  const input = /** @type {HTMLInputElement} */ (event.target);
  const description = knownSites.get(input.dataset.site ?? "");
  if (!description) return;
  const origins = matchPatterns(description);
  sitesOutcome.textContent = "";
  let isGranted = false;
  let answer;
  if (input.checked) {
    // First, inside the click: Chrome grants permissions only on a user gesture.
    isGranted = await chrome.permissions.request({ origins }).catch(() => false);
    answer = await chrome.runtime.sendMessage({ type: "options.site_switch", name: description.name, isOn: isGranted });
  } else {
    answer = await chrome.runtime.sendMessage({ type: "options.site_switch", name: description.name, isOn: false });
    // Origins the manifest grants (a developer's copy) cannot be given back: the switch alone turns the site off.
    await chrome.permissions.remove({ origins }).catch(() => false);
  }
  renderSites(answer);
  const isOn = answer.rows.find((row) => row.name === description.name)?.isOn === true;
  sitesOutcome.textContent = isOn
    ? `${description.title} is on: reload its open pages.`
    : isGranted || !input.checked
      ? `${description.title} is off.`
      : `${description.title} stays off: Chrome did not allow it.`;
  sitesOutcome.dataset.site = description.name;
});

chrome.storage.onChanged.addListener(() => {
  renderOutcome();
});
loadSiteList().catch((error) => {
  sitesOutcome.textContent = `The sites could not be listed: ${error?.message ?? error}`;
});
loadNotifyApprovals();
load().then(renderOutcome);
showStatus(document);
