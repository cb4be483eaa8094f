/**
 * Frames sent to the server and not yet acknowledged (SPEC §9: "keeps frames
 * it has not had an ack for and sends them again after a reconnect").
 *
 * The list lives in `store` (chrome.storage.local in the extension), so a
 * service worker that is stopped and started again still has it.
 */

import { serialisedUpdates } from "./serialised.js";

/**
 * @typedef {import('./serialised.js').Store} Store
 * @typedef {{id: string, [field: string]: any}} Frame
 */

/**
 * chrome.storage.local holds 10 MB without the `unlimitedStorage`
 * permission, and a final message may be up to 1 MiB: the outbox keeps to
 * part of it, so that a write never fails for want of room.
 */
export const DEFAULT_MAX_CHARS = 6 * 1024 * 1024;

export class Outbox {
  /**
   * @param {Store} store
   * @param {{key?: string, limit?: number, maxChars?: number}} [options] `limit`: frames kept;
   *   `maxChars`: their JSON length together; past either the oldest go first (the newest frame always stays)
   */
  constructor(store, { key = "outbox", limit = 200, maxChars = DEFAULT_MAX_CHARS } = {}) {
    if (!(Number.isInteger(limit) && limit > 0)) throw new RangeError(`outbox limit must be a positive integer, not ${limit}`);
    if (!(Number.isInteger(maxChars) && maxChars > 0)) throw new RangeError(`outbox maxChars must be a positive integer, not ${maxChars}`);
    this.limit = limit;
    this.maxChars = maxChars;
    /** Changes the stored `{frames, dropped}`, one call at a time (one Outbox per store and key). */
    this.serialised = serialisedUpdates(store, key, normalised);
  }

  /**
   * Keeps `frame` until `ack(frame.id)`. Adding an id already kept replaces
   * that frame in place (a frame sent again is still the same frame).
   *
   * @param {Frame} frame
   * @returns {Promise<void>}
   */
  add(frame) {
    if (!frame || typeof frame.id !== "string" || !frame.id) {
      return Promise.reject(new TypeError("an outbox frame needs a string id"));
    }
    return this.serialised((state) => {
      const index = state.frames.findIndex((kept) => kept.id === frame.id);
      if (index >= 0) {
        state.frames[index] = frame;
        return;
      }
      state.frames.push(frame);
      let excess = Math.max(state.frames.length - this.limit, 0);
      let chars = 0;
      for (let i = state.frames.length - 1; i >= excess; i--) {
        chars += JSON.stringify(state.frames[i]).length;
        if (chars > this.maxChars && i < state.frames.length - 1) {
          excess = i + 1;
          break;
        }
      }
      if (excess > 0) {
        state.frames.splice(0, excess);
        state.dropped += excess;
      }
    }, true);
  }

  /**
   * Forgets the frame with this id.
   *
   * @param {string} id
   * @returns {Promise<boolean>} whether it was kept
   */
  ack(id) {
    return this.serialised((state) => {
      const index = state.frames.findIndex((kept) => kept.id === id);
      if (index >= 0) state.frames.splice(index, 1);
      return index >= 0;
    }, true);
  }

  /** @returns {Promise<Frame[]>} the frames not acknowledged yet, oldest first */
  pending() {
    return this.serialised((state) => state.frames.slice(), false);
  }

  /** @returns {Promise<number>} how many frames were dropped, unacknowledged, to keep the limit */
  dropped() {
    return this.serialised((state) => state.dropped, false);
  }
}

/**
 * The stored state, or an empty one where the store holds nothing usable.
 *
 * @returns {{frames: Frame[], dropped: number}}
 */
function normalised(stored) {
  const frames = Array.isArray(stored?.frames) ? stored.frames.filter((frame) => typeof frame?.id === "string") : [];
  const dropped = Number.isInteger(stored?.dropped) && stored.dropped >= 0 ? stored.dropped : 0;
  return { frames, dropped };
}

/** Error codes that mean the server will never take the frame: it leaves the outbox. */
const REJECTED_FRAME_CODES = new Set(["invalid", "bad_frame", "too_large", "unknown_type"]);
/**
 * Error codes after which the same frame may be taken later: it stays in the
 * outbox and goes again on this socket after a delay that grows with each
 * refusal of that frame (`rate_limited`: dropped by the frame limit;
 * `server_error`: the server failed to store it, e.g. its database was away).
 */
const RETRY_FRAME_CODES = new Set(["rate_limited", "server_error"]);

/**
 * What the outbox does with a frame the server answered `error` with `code`:
 * `"drop"` it, send it again later (`"retry"`), or nothing (`null`: an error
 * that is not about a kept frame, such as an unauthorized hello, which the
 * server's close follows).
 *
 * @returns {"drop" | "retry" | null}
 */
export function refusedFrameAction(code) {
  if (REJECTED_FRAME_CODES.has(code)) return "drop";
  if (RETRY_FRAME_CODES.has(code)) return "retry";
  return null;
}
