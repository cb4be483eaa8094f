/**
 * Questions to the server on the socket, each waiting for the frame that
 * carries its `id` back (lib/answers.js): `guide.get`, `status.get`,
 * `conversation.pause` and `conversation.resume`. Never kept in the outbox.
 */

import { NotConnected, PendingAnswers } from "../lib/answers.js";
import { send } from "./socket.js";
import { statusLine } from "./connection-status.js";

/**
 * The questions waiting for their answer. Kept in this worker only: a
 * question lives no longer than the socket it went out on, and whoever
 * asked is waiting for the answer in this worker's lifetime.
 */
export const answers = new PendingAnswers();

/**
 * Sends the question `frameWithId` makes and waits for the frame that
 * answers it (an `error` frame too). Fails at once when not connected, with
 * the connection's state in the message, and after ANSWER_TIMEOUT_MS
 * without an answer.
 *
 * @param {(id: string) => {type: string, id: string}} frameWithId the question, given its id
 * @returns {Promise<any>} the answering frame
 * @throws {Error} with a message to show the person
 */
export async function ask(frameWithId) {
  const id = crypto.randomUUID();
  const question = frameWithId(id);
  let isSent = false;
  try {
    return await answers.ask(id, () => (isSent = send(question)), question.type);
  } catch (error) {
    if (isSent || !(error instanceof NotConnected)) throw error;
    // Not sent: say what the connection is doing, as the popup's state line does.
    const state = await statusLine();
    throw new NotConnected(`not connected to the Conductor server${state ? ` (${state})` : ""}`);
  }
}
