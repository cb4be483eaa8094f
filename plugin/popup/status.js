/**
 * The connection's state as the service worker records it
 * (chrome.storage.session "status"), shown in the popup and the options
 * page and kept current as it changes.
 */

const LABELS = {
  connected: "connected",
  connecting: "connecting",
  refused: "token refused",
  paused: "paused",
  unconfigured: "not set up",
};

/** Fills `#state`, `#detail` and, where the page has them, `#outdated` (the server asks for a newer plugin), `#pending`, `#dropped` and `#last-ack`. */
export function showStatus(document) {
  const byId = (id) => document.getElementById(id);
  const render = async () => {
    const { status = {}, acks = [], pluginOutdated = false } = await chrome.storage.session.get(["status", "acks", "pluginOutdated"]);
    const { outbox } = await chrome.storage.local.get("outbox");
    const state = byId("state");
    state.textContent = LABELS[status.state] ?? "starting";
    state.dataset.state = status.state ?? "";
    byId("detail").textContent = status.detail ?? "";
    if (byId("outdated")) byId("outdated").hidden = !(pluginOutdated && status.state === "connected");
    if (byId("pending")) byId("pending").textContent = String(outbox?.frames?.length ?? 0);
    if (byId("dropped")) byId("dropped").textContent = String(outbox?.dropped ?? 0);
    if (byId("last-ack")) {
      const last = acks[acks.length - 1];
      byId("last-ack").textContent = last ? `${last.ms} ms, ${new Date(last.at).toLocaleTimeString()}` : "none yet";
    }
  };
  chrome.storage.onChanged.addListener(() => render());
  return render();
}
