import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { proxyErrorCode } from "../lib/proxy.js";

describe("proxyErrorCode", () => {
  const table = [
    [200, 'data: {"type":"message_stop"}', null],
    [401, '{"error":{"type":"authentication_error"}}', "blocked"],
    [403, '{"detail":"Unusual activity has been detected from your device. Try again later."}', "blocked"],
    [200, '<html><div id="cf-please-wait"></div></html>', "blocked"],
    [503, "<html><head><title>Just a moment...</title></head></html>", "blocked"],
    [429, '{"detail":"Too many requests"}', null],
    [500, "", null],
    [null, null, null],
    [200, `${"x".repeat(70 * 1024)}cf-please-wait`, null], // only the start of a body is searched
  ];
  for (const [status, body, expected] of table) {
    it(`${status} ${String(body).slice(0, 40)} -> ${expected}`, () => {
      assert.equal(proxyErrorCode(status, body), expected);
    });
  }
});
