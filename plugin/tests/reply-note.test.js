import assert from "node:assert/strict";
import test from "node:test";

import { afterProxyDelivery, replyNoteText } from "../lib/reply-note.js";

test("a posted reply marks the tab with a note unless the options ask for a reload", () => {
  const posted = { ok: true, status: 200, body: "{}", error: null, error_code: null };
  const table = [
    [posted, undefined, "note"],
    [posted, {}, "note"],
    [posted, { reloadAfterDelivery: false }, "note"],
    [posted, { reloadAfterDelivery: true }, "reload"],
    [{ ...posted, status: 204 }, { reloadAfterDelivery: true }, "reload"],
  ];
  for (const [result, settings, expected] of table) assert.equal(afterProxyDelivery(result, settings), expected);
});

test("nothing posted leaves the tab as it was", () => {
  const table = [
    { ok: false, status: 403, body: "", error: "refused", error_code: "blocked" },
    { ok: true, status: 500, body: "", error: null, error_code: null },
    { ok: false, status: null, body: null, error: "no tab", error_code: "no_tab" },
    null,
  ];
  for (const result of table) {
    assert.equal(afterProxyDelivery(result, { reloadAfterDelivery: true }), null);
    assert.equal(afterProxyDelivery(result, undefined), null);
  }
});

test("the note counts the replies posted since the page loaded", () => {
  assert.equal(replyNoteText(1), "Conductor posted a reply: reload to see it.");
  assert.equal(replyNoteText(3), "Conductor posted 3 replies: reload to see them.");
});
