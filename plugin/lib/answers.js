/**
 * Questions to the server and their answers (SPEC §6: `guide.get` →
 * `guide`, `status.get` → `status`, `conversation.pause` / `resume` →
 * `ack`), each matched to its question by the frame's `id`, an `error`
 * with that `id` too.
 *
 * A question is not a message to keep: it never goes into the outbox, is
 * never resent after a reconnect, and fails at once when the socket is not
 * open, so whoever asked sees why straight away.
 */

/** How long the server has to answer a question. */
export const ANSWER_TIMEOUT_MS = 10_000;

/** A question that could not be asked: the socket is not open (or not past `hello`). */
export class NotConnected extends Error {
  constructor(message = "not connected to the Conductor server") {
    super(message);
    this.name = "NotConnected";
  }
}

/** The server answered a question with an `error` frame, or with a frame that is not the answer. */
export class ServerRefused extends Error {
  /** @param {string} code @param {string} detail */
  constructor(code, detail) {
    super(detail ? `the server refused: ${detail} (${code})` : `the server refused (${code})`);
    this.name = "ServerRefused";
    this.code = code;
  }
}

/**
 * The answer to a question, when it is a frame of `type`.
 *
 * @param {any} frame the frame that carried the question's id back
 * @param {string} type the answer's frame type (`status`, `ack`, ...)
 * @throws {ServerRefused} for an `error` frame, or a frame of another type
 */
export function answerOf(frame, type) {
  if (frame?.type === "error") throw new ServerRefused(String(frame.code ?? "error"), String(frame.detail ?? ""));
  if (frame?.type !== type) throw new ServerRefused("invalid", `its answer is not a ${type} frame`);
  return frame;
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
  constructor({ timeoutMs = ANSWER_TIMEOUT_MS, setTimer = (run, ms) => setTimeout(run, ms), clearTimer = (timer) => clearTimeout(timer) } = {}) {
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
