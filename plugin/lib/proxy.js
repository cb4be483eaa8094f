/**
 * Reading the answer to a proxied delivery request (SPEC §6 `error_code`).
 */

/** Only the start of a body is searched: a challenge page says what it is early. */
const SCANNED_CHARS = 64 * 1024;

// Cloudflare's interstitials (chat2api, 2024; still so in 2026) and the
// usual title of its block page. Any of these in a body means the request
// was stopped before it reached the chat app.
const CHALLENGE_MARKERS = [
  "cf-please-wait",
  "challenge-platform",
  "cf_chl_",
  "<title>Just a moment...</title>",
  "Attention Required! | Cloudflare",
];

/**
 * `"blocked"` when the app refused the request as automated (401/403, or a
 * challenge page whatever the status), else `null`.
 *
 * @param {number | null | undefined} status
 * @param {string | null | undefined} body
 * @returns {"blocked" | null}
 */
export function proxyErrorCode(status, body) {
  if (status === 401 || status === 403) return "blocked";
  const head = typeof body === "string" ? body.slice(0, SCANNED_CHARS) : "";
  return CHALLENGE_MARKERS.some((marker) => head.includes(marker)) ? "blocked" : null;
}
