/**
 * When the newest answer of a site read from the page is finished (SPEC §9,
 * "Platforms as data"): when its streaming signal drops, or, where the
 * signal was never seen for it, when its text has stayed the same for a few
 * seconds (`quietMs`, a plugin setting) and its `finished` markers (the
 * action bar) are there.
 *
 * content/main.js looks at the page after each change (and when `wakeIn`
 * says, since a quiet page makes no change to wake it) and hands what it
 * saw to `look`; `isWriting` goes to lib/capture.js as the page's own
 * "writing" signal, so the tracker reads the answer once it went false.
 *
 * What this never does:
 * - capture a turn twice: a turn is finished once, then it is `settled`, and
 *   only a newer turn can be written (the tracker also sends one text once);
 * - capture a turn still growing: the quiet rule waits `quietMs` after the
 *   text's last change, and a change after that makes it writing again;
 * - take a turn the page merely showed (the history a page renders when it
 *   loads, a turn there before the first look) for a new answer: the quiet
 *   rule only reads a turn it saw grow (its text changed while it was the
 *   newest), which a streamed answer does and a rendered history does not.
 *
 * A turn finished by the quiet rule on a page where the streaming selectors
 * never matched says so (`signalNeverSeen`): the description's streaming
 * selectors are likely out of date, which content/main.js reports
 * (`selector_missing`).
 *
 * Pure: the clock's readings are passed in; turns are compared by identity.
 */

export const DEFAULT_QUIET_MS = 3000;
/** The setting's bounds: shorter reads answers that only paused, longer makes the person wait. */
export const MIN_QUIET_MS = 1000;
export const MAX_QUIET_MS = 30_000;

/** The quiet period a setting asks for, within bounds; the default for anything else. */
export function quietMsOf(value) {
  const ms = Number(value);
  if (!Number.isFinite(ms) || ms <= 0) return DEFAULT_QUIET_MS;
  return Math.min(MAX_QUIET_MS, Math.max(MIN_QUIET_MS, Math.round(ms)));
}

/**
 * @typedef {{isStreaming: boolean, turn: object | null, text: string, isFinishedShown: boolean}} PageLook
 *   what the page shows: the streaming selectors matching, its newest turn
 *   (any identity) and that turn's text, and whether the turn shows its
 *   `finished` markers (true when the description lists none)
 * @typedef {{isWriting: boolean, finished: "" | "signal" | "quiet", signalNeverSeen: boolean}} TurnState
 *   `finished` is set on the one look that finished a turn
 */

export class TurnWatch {
  /** @param {{quietMs?: number}} [options] */
  constructor({ quietMs = DEFAULT_QUIET_MS } = {}) {
    this.quietMs = quietMs;
    this.isFirstLook = true;
    /** What the last look decided: a page writing has no finished answer to read. */
    this.isWriting = false;
    /** The newest turn already finished (or there at the first look): never written again. */
    this.settled = null;
    /** The streaming signal was seen since the last turn finished. */
    this.isSignalOn = false;
    /** The streaming signal was seen on this page at all. */
    this.hasSeenSignal = false;
    /** The turn the quiet rule follows: its text, when that last changed, whether it grew. */
    this.followed = { turn: null, text: "", changedAt: 0, hasGrown: false };
  }

  /**
   * @param {PageLook} look
   * @param {number} now milliseconds
   * @returns {TurnState}
   */
  look(seen, now) {
    const state = this.decide(seen, now);
    this.isWriting = state.isWriting;
    return state;
  }

  /** @param {PageLook} look @param {number} now @returns {TurnState} */
  decide({ isStreaming, turn, text, isFinishedShown }, now) {
    if (this.isFirstLook) {
      this.isFirstLook = false;
      this.settled = turn; // what the page showed before: not a new answer
      this.follow(turn, text, now);
    }
    const state = (isWriting, finished = "") => ({ isWriting, finished, signalNeverSeen: !this.hasSeenSignal });
    if (isStreaming) {
      this.isSignalOn = this.hasSeenSignal = true;
      return state(true);
    }
    if (this.isSignalOn) {
      // The signal dropped; with finished markers listed, the turn is done once they show.
      if (turn && !isFinishedShown) return state(true);
      this.isSignalOn = false;
      this.settle(turn, text, now);
      return state(false, "signal");
    }
    if (!turn || turn === this.settled) return state(false);
    if (turn !== this.followed.turn) this.follow(turn, text, now);
    else if (text !== this.followed.text) this.followed = { turn, text, changedAt: now, hasGrown: true };
    const { hasGrown, changedAt } = this.followed;
    if (!hasGrown) return state(false);
    if (text.trim() && isFinishedShown && now - changedAt >= this.quietMs) {
      this.settle(turn, text, now);
      return state(false, "quiet");
    }
    return state(true);
  }

  /** How long until a look could finish the followed turn by the quiet rule (no change will come to wake one), or null. */
  wakeIn(now) {
    const { turn, hasGrown, changedAt } = this.followed;
    if (this.isSignalOn || !turn || turn === this.settled || !hasGrown) return null;
    return Math.max(0, changedAt + this.quietMs - now);
  }

  follow(turn, text, now) {
    this.followed = { turn, text, changedAt: now, hasGrown: false };
  }

  settle(turn, text, now) {
    this.settled = turn;
    this.follow(turn, text, now);
  }
}
