/**
 * The two delivery kinds (`browser.proxy_delivery`, `browser.dom_delivery`)
 * as results: what a failure answers, when the text reached the chat, what
 * is remembered, and what a repeat of the same `delivery_key` answers; and
 * `Deliveries`, which performs each key once. Finding the tab and talking to
 * it is the service worker's (worker/delivering.js).
 */

import { isPosted, isSentToComposer } from "./frames.js";

/**
 * The start of a proxy answer's body is what the server reads (the new
 * message's id, an early error); all of it, for hundreds of deliveries,
 * would not fit in chrome.storage.local.
 */
export const REMEMBERED_BODY_CHARS = 4096;

/**
 * @typedef {{
 *   failed(error: string, errorCode?: string | null): any,
 *   isDone(result: any): boolean,
 *   remembered(result: any): any,
 *   fromEarlier(earlier: any): any,
 * }} DeliveryKind
 *   `isDone`: the text reached the chat, so a repeat must not send it again;
 *   `fromEarlier`: the answer to a repeat, given what a delivery of either
 *   kind under the same key answered or remembered (null: deliver).
 */

/** Results of DOM deliveries carry `evidence`; proxy results never do. */
function isDomResult(result) {
  return typeof result?.evidence === "object" && result.evidence !== null;
}

/**
 * The two kinds share one `delivery_key` memory: a task that fell back from
 * one method to the other keeps its key (SPEC §6.1), and a text already
 * sent by either must not go out again by the other.
 *
 * @type {{proxy: DeliveryKind, dom: DeliveryKind}}
 */
export const DELIVERY_KINDS = {
  proxy: {
    failed: (error, errorCode = null) => ({ ok: false, status: null, body: null, error, error_code: errorCode }),
    isDone: isPosted,
    remembered: (result) => (typeof result.body === "string" ? { ...result, body: result.body.slice(0, REMEMBERED_BODY_CHARS) } : result),
    // Sent through the composer already: not posted again. `blocked` moves
    // the server on to its next method (SPEC §6.1), whose repeat of this key
    // answers with the DOM delivery's own result.
    fromEarlier: (earlier) =>
      isDomResult(earlier)
        ? DELIVERY_KINDS.proxy.failed("already sent through the composer (browser.dom_delivery); not posted again", "blocked")
        : earlier,
  },
  dom: {
    failed: (error, errorCode = null) => ({ ok: false, error, error_code: errorCode, evidence: { user_turn_seen: false } }),
    isDone: isSentToComposer,
    remembered: (result) => result,
    // A proxy post of the same key is left to the page's own check: its
    // user turn, shown last, is answered `already_sent` without typing.
    fromEarlier: (earlier) => (isDomResult(earlier) ? earlier : null),
  },
};

/**
 * Deliveries performed once per `delivery_key`: a repeat while the first
 * runs waits for it, a repeat after a delivery that reached the chat gets
 * the remembered result. Only deliveries that reached the chat are
 * remembered, so a failed one is tried again.
 */
export class Deliveries {
  /** @param {{recall(key: string): Promise<any>, remember(key: string, result: any): Promise<void>}} memory a DeliveryMemory */
  constructor(memory) {
    this.memory = memory;
    /** Deliveries being performed, by delivery_key. */
    this.inFlight = new Map();
  }

  /**
   * @param {any} frame
   * @param {DeliveryKind} kind
   * @param {(frame: any) => Promise<any>} perform makes the delivery; a rejection is answered as a failure
   */
  async deliver(frame, kind, perform) {
    const key = typeof frame.delivery_key === "string" ? frame.delivery_key : "";
    if (key) {
      const earlier = kind.fromEarlier(await this.memory.recall(key));
      if (earlier) return earlier;
      if (this.inFlight.has(key)) {
        const answered = kind.fromEarlier(await this.inFlight.get(key).catch(() => null));
        if (answered) return answered;
      }
    }
    const performing = perform(frame).catch((error) => kind.failed(`the delivery failed in the browser: ${error?.message ?? error}`)).then(async (result) => {
      if (key && kind.isDone(result)) await this.memory.remember(key, kind.remembered(result));
      return result;
    });
    if (key) this.inFlight.set(key, performing);
    try {
      return await performing;
    } finally {
      if (key && this.inFlight.get(key) === performing) this.inFlight.delete(key);
    }
  }
}

/** What a delivery's failure says about the site: a report of its kind. */
const DELIVERY_REPORTS = { page_value_missing: "page_value_missing", blocked: "delivery_blocked" };

/**
 * The adapter report (SPEC §6 browser.adapter_report) a failed delivery
 * counts, or null: `refused` is the plugin's own refusal (lib/delivery-rules.js:
 * its `reason` says which check), else the app's.
 *
 * @param {any} frame the delivery frame
 * @param {any} result what the delivery answered
 * @param {"http" | "dom"} method
 * @param {{name: string, version: string}[]} adapters
 * @returns {{platform: string, adapter: string, kind: string, detail: Record<string, any>} | null}
 */
export function deliveryFailureReport(frame, result, method, adapters) {
  const kind = Object.hasOwn(DELIVERY_REPORTS, result?.error_code) ? DELIVERY_REPORTS[result.error_code] : undefined;
  const platform = typeof frame.platform === "string" ? frame.platform : "";
  const adapter = adapters.find((known) => known.name === platform);
  if (!kind || !adapter) return null;
  const detail = {
    method,
    ...(Number.isInteger(result.status) ? { status: result.status } : {}),
    ...(typeof result.refused === "string" ? { reason: result.refused } : {}),
  };
  return { platform, adapter: adapter.version, kind, detail };
}
