// Pairing codes (lib/pairing.js) against the vectors the server's encoder writes
// (tests/ingest/test_pairing.py reads the same file).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { connectionOutcome, parsePairingCode, pairingWarnings } from "../lib/pairing.js";
import { UNENCRYPTED } from "../lib/server-url.js";

const VECTORS = JSON.parse(readFileSync(new URL("./fixtures/pairing-codes.json", import.meta.url), "utf8"));

/** What the server's encoder writes (ingest/pairing.py), for codes made here. */
function encode(fields) {
  const json = JSON.stringify(fields);
  const binary = String.fromCharCode(...new TextEncoder().encode(json));
  return `conductor-pair:v1:${btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")}`;
}

describe("parsePairingCode", () => {
  for (const vector of VECTORS.valid) {
    it(`reads the server's code for ${vector.client_id}`, () => {
      // The format; whether the server URL is taken is the next test's.
      const result = parsePairingCode(vector.code, { isUnencryptedAccepted: true });
      assert.equal(result.ok, true, result.error);
      assert.deepEqual(result.pairing, { serverUrl: vector.server, clientId: vector.client_id, token: vector.token });
      assert.equal(encode({ server: vector.server, client_id: vector.client_id, token: vector.token }), vector.code);
    });
  }

  for (const vector of VECTORS.invalid) {
    it(`refuses ${vector.why} with the server's reason`, () => {
      assert.deepEqual(parsePairingCode(vector.code), { ok: false, error: vector.error });
    });
  }

  it("round-trips whatever the fields hold, wrapped or padded", () => {
    const samples = ["a", "ü ï \"q\" \\ /", "😀 emoji", "x".repeat(500), "line\nbreak", "{\"json\":1}"];
    for (const clientId of samples) {
      for (const token of samples) {
        for (const server of ["http://127.0.0.1:8000", "https://conductor.example", "http://[::1]:9"]) {
          const code = encode({ server, client_id: clientId, token });
          const wrapped = `  ${code.slice(0, 30)}\n${code.slice(30)}\r\n`;
          for (const text of [code, wrapped]) {
            assert.deepEqual(parsePairingCode(text).pairing, { serverUrl: server, clientId, token });
          }
        }
      }
    }
  });

  it("refuses every cut of a code short of the whole", () => {
    const code = VECTORS.valid[0].code;
    for (let length = 0; length < code.length; length += 1) {
      assert.equal(parsePairingCode(code.slice(0, length)).ok, false, `accepted ${length} characters`);
    }
  });

  it("refuses plain http to another machine unless the person ticked the box", () => {
    const office = VECTORS.valid.find((vector) => vector.client_id === "office");
    assert.deepEqual(parsePairingCode(office.code), { ok: false, error: UNENCRYPTED, isUnencrypted: true });
    assert.equal(parsePairingCode(office.code, { isUnencryptedAccepted: true }).ok, true);
    for (const server of ["http://conductor.example", "http://10.0.0.5:8000", "http://[fe80::1]:8000", "http://127.example.org"]) {
      assert.equal(parsePairingCode(encode({ server, client_id: "c", token: "t" })).isUnencrypted, true, server);
    }
    for (const server of ["http://127.0.0.1:8000", "http://127.8.9.10", "http://localhost:8000", "http://[::1]:9", "https://conductor.example"]) {
      assert.equal(parsePairingCode(encode({ server, client_id: "c", token: "t" })).ok, true, server);
    }
  });

  it("refuses what is not a string without throwing", () => {
    for (const value of [undefined, null, 42, {}]) assert.equal(parsePairingCode(value).ok, false);
  });
});

describe("pairingWarnings", () => {
  it("warns about plain http to another machine only", () => {
    assert.equal(pairingWarnings("http://192.168.1.20:8000").length, 1);
    assert.match(pairingWarnings("http://conductor.example")[0], /unencrypted/);
    for (const url of ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000", "https://conductor.example"]) {
      assert.deepEqual(pairingWarnings(url), [], url);
    }
  });

  it("comes with a parsed code", () => {
    const office = VECTORS.valid.find((vector) => vector.client_id === "office");
    assert.equal(parsePairingCode(office.code, { isUnencryptedAccepted: true }).warnings.length, 1);
    assert.deepEqual(parsePairingCode(VECTORS.valid[0].code).warnings, []);
  });
});

describe("connectionOutcome", () => {
  const settings = { serverUrl: "http://127.0.0.1:8000", clientId: "browser-1" };

  it("says where it is connected, and as whom", () => {
    assert.deepEqual(connectionOutcome({ state: "connected" }, settings), {
      text: "Connected to http://127.0.0.1:8000 as browser-1.", isConnected: true,
    });
  });

  it("names the exact reason it is not", () => {
    const cases = [
      [{ state: "connecting", reason: "unreachable" }, /^Server unreachable: http:\/\/127\.0\.0\.1:8000 does not answer/],
      [{ state: "refused" }, /^Token refused: .* Pair again from the admin\.$/],
      [{ state: "connected", reason: "outdated" }, /^Connected to .*, but this plugin is outdated/],
      [{ state: "connecting" }, /^Connecting to http:\/\/127\.0\.0\.1:8000 as browser-1/],
      [{ state: "paused", detail: "paused from the popup" }, /^Paused: paused from the popup\.$/],
    ];
    for (const [status, expected] of cases) assert.match(connectionOutcome(status, settings).text, expected);
  });

  it("does not take the previous settings' connection for the new one's", () => {
    const saved = { ...settings, savedAt: 2000 };
    assert.match(connectionOutcome({ state: "connected", at: 1000 }, saved).text, /^Connecting to /);
    assert.match(connectionOutcome({ state: "connected", at: 2500 }, saved).text, /^Connected to /);
  });

  it("says nothing before the browser is paired", () => {
    assert.deepEqual(connectionOutcome({ state: "unconfigured" }, undefined), { text: "", isConnected: false });
  });
});
