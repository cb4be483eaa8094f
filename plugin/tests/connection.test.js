import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { connectionBlock, hasSettings, holdOffAfterClose, isSilent, PING_MS, reconnectingStatus, SILENCE_MS } from "../lib/connection.js";

const settings = { serverUrl: "https://conductor.example.org", clientId: "laptop", token: "t" };

describe("connectionBlock", () => {
  it("lets complete settings connect", () => {
    assert.equal(connectionBlock({ settings, paused: false, holdOff: undefined }), null);
  });

  it("asks for a pairing when a field is missing", () => {
    for (const missing of [undefined, { ...settings, token: "" }, { ...settings, clientId: "" }, { ...settings, serverUrl: "ftp://x" }]) {
      assert.equal(hasSettings(missing), false);
      assert.equal(connectionBlock({ settings: missing, paused: false, holdOff: undefined }).state, "unconfigured");
    }
  });

  it("refuses plain http to another machine unless accepted, before a pause or a hold-off", () => {
    const plain = { ...settings, serverUrl: "http://conductor.example.org" };
    const block = connectionBlock({ settings: plain, paused: true, holdOff: { state: "refused", detail: "x" } });
    assert.equal(block.state, "unconfigured");
    assert.match(block.detail, /unencrypted/);
    assert.equal(connectionBlock({ settings: { ...plain, isUnencryptedAccepted: true }, paused: false, holdOff: undefined }), null);
    assert.equal(connectionBlock({ settings: { ...settings, serverUrl: "http://127.0.0.1:8000" }, paused: false, holdOff: undefined }), null);
  });

  it("shows a pause, then a hold-off", () => {
    assert.deepEqual(connectionBlock({ settings, paused: true, holdOff: undefined }), { state: "paused", detail: "paused from the popup" });
    const holdOff = { state: "refused", detail: "token refused (close code 4401); check the options" };
    assert.deepEqual(connectionBlock({ settings, paused: false, holdOff }), holdOff);
  });
});

describe("after a close", () => {
  it("holds off after a refused token or a takeover, and only then", () => {
    assert.equal(holdOffAfterClose(4401).state, "refused");
    assert.equal(holdOffAfterClose(4403).state, "refused");
    assert.match(holdOffAfterClose(4403).detail, /4403/);
    assert.deepEqual(holdOffAfterClose(4409), { state: "paused", detail: "another browser window of this client took over" });
    for (const code of [1000, 1006, 1011, 4000, 4400, 4429]) assert.equal(holdOffAfterClose(code), null);
  });

  it("says the server was unreachable when no hello.ok came on that socket", () => {
    assert.deepEqual(reconnectingStatus(1006, { wasReached: false, delayMs: 3200 }), {
      state: "connecting", detail: "server unreachable (close code 1006); reconnecting in 4 s", reason: "unreachable",
    });
    assert.deepEqual(reconnectingStatus(1006, { wasReached: true, delayMs: 1000 }), { state: "connecting", detail: "reconnecting in 1 s", reason: "" });
  });

  it("counts a socket silent for two pings and a margin as dead", () => {
    assert.ok(SILENCE_MS > 2 * PING_MS);
    assert.equal(isSilent(0, SILENCE_MS), false);
    assert.equal(isSilent(0, SILENCE_MS + 1), true);
  });
});
