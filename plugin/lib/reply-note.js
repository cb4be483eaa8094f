/**
 * What a chat tab shows after Conductor posted a reply over HTTP (a
 * `browser.proxy_delivery`): the chat app's own page did not make that
 * request, so it shows the new turn only once reloaded. The tab gets a
 * small note saying so, with a Reload button; the options can have the tab
 * reloaded instead. DOM deliveries type into the page itself and need
 * neither.
 *
 * `afterProxyDelivery` and `replyNoteText` are pure; `showReplyNote` takes
 * the page's `document`.
 */

import { isPosted } from "./frames.js";

export const NOTE_ID = "conductor-reply-note";

/**
 * What the tab that made a proxy delivery should do now.
 *
 * @param {any} result the page's answer (`ProxyResult`)
 * @param {{reloadAfterDelivery?: boolean} | undefined} settings
 * @returns {"reload" | "note" | null} null: nothing was posted, the page is as it was
 */
export function afterProxyDelivery(result, settings) {
  if (!isPosted(result)) return null;
  return settings?.reloadAfterDelivery === true ? "reload" : "note";
}

/** @param {number} count replies posted since the page was loaded */
export function replyNoteText(count) {
  return count === 1
    ? "Conductor posted a reply: reload to see it."
    : `Conductor posted ${count} replies: reload to see them.`;
}

const STYLE = [
  "position: fixed", "right: 16px", "bottom: 16px", "z-index: 2147483647", "display: flex", "gap: 8px",
  "align-items: center", "max-width: 28rem", "padding: 8px 12px", "border-radius: 8px",
  "background: #1f2328", "color: #fff", "font: 14px/1.4 system-ui, sans-serif", "box-shadow: 0 2px 8px rgba(0,0,0,.3)",
].join("; ");
const BUTTON_STYLE = "font: inherit; padding: 2px 10px; border-radius: 6px; border: 1px solid #fff; cursor: pointer";

/**
 * Shows the note in the page, or counts one more reply on the note already shown.
 * The page is never reloaded from here but by the person's click on Reload.
 *
 * @param {Document} document
 * @returns {HTMLElement} the note
 */
export function showReplyNote(document) {
  const shown = document.getElementById(NOTE_ID);
  if (shown) {
    const count = Number(shown.dataset.count) + 1;
    shown.dataset.count = String(count);
    shown.querySelector("span").textContent = replyNoteText(count);
    return shown;
  }
  const note = document.createElement("div");
  note.id = NOTE_ID;
  note.dataset.count = "1";
  note.setAttribute("role", "status");
  note.setAttribute("style", STYLE);
  const text = document.createElement("span");
  text.textContent = replyNoteText(1);
  const reload = document.createElement("button");
  reload.type = "button";
  reload.textContent = "Reload";
  reload.setAttribute("style", `${BUTTON_STYLE}; background: #fff; color: #1f2328`);
  reload.addEventListener("click", () => document.defaultView?.location.reload());
  const dismiss = document.createElement("button");
  dismiss.type = "button";
  dismiss.textContent = "Dismiss";
  dismiss.setAttribute("style", `${BUTTON_STYLE}; background: transparent; color: #fff`);
  dismiss.addEventListener("click", () => note.remove());
  note.append(text, reload, dismiss);
  document.body.appendChild(note);
  return note;
}
