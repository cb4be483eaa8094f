/**
 * Reconnect timing: "full jitter" over an exponential (AWS Architecture Blog,
 * "Exponential Backoff And Jitter"), so that many plugins dropped by one
 * server restart do not all come back in the same second.
 */

/** Past this exponent the cap always wins; it also keeps 2 ** attempt finite. */
const MAX_EXPONENT = 30;

/**
 * The delay before reconnect attempt `attempt` (0 for the first retry).
 *
 * @param {number} attempt
 * @param {{baseMs?: number, capMs?: number, random?: () => number}} [options]
 * @returns {number} whole milliseconds in [0, min(capMs, baseMs * 2 ** attempt)]
 */
export function reconnectDelay(attempt, { baseMs = 1000, capMs = 60000, random = Math.random } = {}) {
  const exponent = Number.isFinite(attempt) ? Math.min(Math.max(Math.floor(attempt), 0), MAX_EXPONENT) : 0;
  const ceiling = Math.min(capMs, baseMs * 2 ** exponent);
  // A random source that strays outside [0, 1) must not stretch the bound.
  const fraction = Math.min(Math.max(Number(random()) || 0, 0), 1);
  return Math.floor(fraction * ceiling);
}
