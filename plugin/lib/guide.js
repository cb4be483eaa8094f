/**
 * The tool guide (SPEC §5.5, §6 `guide.get`): the frame that asks for it,
 * the matching of the server's answer to its question, and when the
 * "insert into every new conversation" option inserts it.
 *
 * A `guide.get` is a question, not a message to keep: it never goes into the
 * outbox, is never resent after a reconnect, and fails at once when the
 * socket is not open, so the person who asked sees why straight away.
 */

/** How long the server has to answer a `guide.get`. */
export const GUIDE_TIMEOUT_MS = 10_000;

/** A question that could not be asked: the socket is not open (or not past `hello`). */
export class NotConnected extends Error {
  constructor(message = "not connected to the Conductor server") {
    super(message);
    this.name = "NotConnected";
  }
}

/** The server answered with an `error` frame, or with a `guide` frame missing its fields. */
export class GuideRefused extends Error {
  /** @param {string} code @param {string} detail */
  constructor(code, detail) {
    super(detail ? `the server refused: ${detail} (${code})` : `the server refused (${code})`);
    this.name = "GuideRefused";
    this.code = code;
  }
}

/**
 * @param {{id: string, platform: string, conversationId?: string | null}} question
 *   `conversationId`: the platform's id of the conversation the page shows,
 *   null for a new chat (the server then answers the platform's guide)
 */
export function guideGetFrame({ id, platform, conversationId = null }) {
  return { type: "guide.get", id, platform, conversation_id: conversationId || null };
}

/**
 * The guide in a server's answer to `guide.get`.
 *
 * @param {any} frame a `guide` or `error` frame with the question's id
 * @returns {{version: string, text: string}}
 * @throws {GuideRefused} for an `error` frame or a guide without its text
 */
export function guideFromAnswer(frame) {
  if (frame?.type === "error") throw new GuideRefused(String(frame.code ?? "error"), String(frame.detail ?? ""));
  if (frame?.type !== "guide" || typeof frame.text !== "string" || frame.text.trim() === "" || typeof frame.version !== "string") {
    throw new GuideRefused("invalid", "its answer has no guide text and version");
  }
  return { version: frame.version, text: frame.text };
}

/**
 * Questions sent on the socket, each waiting for the one frame that carries
 * its `id` back (the answer or an `error`), for at most `timeoutMs`.
 * Timers are injected so that `node --test` drives time.
 */
export class PendingAnswers {
  /** @type {Map<string, {resolve: (frame: any) => void, reject: (error: Error) => void, timer: any}>} */
  #waiting = new Map();

  /**
   * @param {{timeoutMs?: number, setTimer?: typeof setTimeout, clearTimer?: typeof clearTimeout}} [options]
   */
  constructor({ timeoutMs = GUIDE_TIMEOUT_MS, setTimer = (run, ms) => setTimeout(run, ms), clearTimer = (timer) => clearTimeout(timer) } = {}) {
    // Wrapped: a browser's setTimeout called as a method of another object throws "Illegal invocation".
    this.timeoutMs = timeoutMs;
    this.setTimer = setTimer;
    this.clearTimer = clearTimer;
  }

  /** How many questions wait for their answer. */
  get size() {
    return this.#waiting.size;
  }

  /**
   * Sends a question and waits for its answer.
   *
   * @param {string} id the question frame's `id`
   * @param {() => boolean} send sends the frame; false when the socket is not open
   * @param {string} what the question, for the timeout's message
   * @returns {Promise<any>} the answering frame (an `error` frame too)
   */
  ask(id, send, what) {
    if (this.#waiting.has(id)) return Promise.reject(new Error(`a question with id ${id} is already waiting`));
    return new Promise((resolve, reject) => {
      const timer = this.setTimer(() => {
        this.#waiting.delete(id);
        reject(new Error(`the server did not answer ${what} within ${Math.round(this.timeoutMs / 1000)} s`));
      }, this.timeoutMs);
      this.#waiting.set(id, { resolve, reject, timer });
      let isSent;
      try {
        isSent = send();
      } catch (error) {
        this.#settle(id)?.reject(error);
        return;
      }
      if (!isSent) this.#settle(id)?.reject(new NotConnected());
    });
  }

  /**
   * Hands a frame from the server to the question it answers.
   *
   * @param {any} frame
   * @returns {boolean} whether it answered a waiting question (and is consumed)
   */
  answer(frame) {
    const waiter = typeof frame?.id === "string" ? this.#settle(frame.id) : null;
    waiter?.resolve(frame);
    return Boolean(waiter);
  }

  /** Fails every waiting question (the socket closed: no answer can come on it). */
  failAll(reason) {
    for (const id of [...this.#waiting.keys()]) this.#settle(id)?.reject(new NotConnected(reason));
  }

  #settle(id) {
    const waiter = this.#waiting.get(id);
    if (!waiter) return null;
    this.#waiting.delete(id);
    this.clearTimer(waiter.timer);
    return waiter;
  }
}

/**
 * What the popup says after "Insert tool guide".
 *
 * @param {{ok: boolean, version?: string, already_filled?: boolean, error?: string} | null | undefined} outcome
 *   the service worker's answer (null: it did not answer)
 */
export function guideOutcomeText(outcome) {
  if (outcome?.ok && outcome.already_filled) return `Tool guide ${outcome.version} is in the composer already: read it and send it.`;
  if (outcome?.ok) return `Tool guide ${outcome.version} inserted: read it and send it.`;
  const reason = String(outcome?.error || "the extension did not answer").replace(/\.+$/, "");
  return `The tool guide was not inserted: ${reason}.`;
}

/**
 * When the "insert the tool guide into every new conversation" option acts.
 *
 * A content script keeps one of these for its page and asks it at load and
 * whenever the page may have moved to another URL (the apps move between
 * chats without loading a page). The answer is yes only:
 * - with the option on;
 * - on a page with no conversation id in its URL (a new chat; an existing
 *   conversation never gets it);
 * - the first time the page is seen at that URL: a person who empties the
 *   composer does not get it back; coming back to a new chat from a
 *   conversation ("New chat") is a new visit and gets it again.
 * Whether the composer is empty is the composer's own check when the text
 * goes in (`fillComposer` never writes over a draft), and a reload is a new
 * page (see plugin/README.md, "The tool guide").
 */
export class NewChatGuide {
  /** @type {string | null} */
  #lastUrl = null;

  /**
   * @param {{isEnabled: boolean, url: string, conversationId: string | null}} page
   * @returns {boolean} whether to insert the guide now
   */
  shouldInsert({ isEnabled, url, conversationId }) {
    const address = String(url).split("#")[0];
    const isNewVisit = address !== this.#lastUrl;
    this.#lastUrl = address;
    return Boolean(isEnabled) && isNewVisit && !conversationId;
  }
}
