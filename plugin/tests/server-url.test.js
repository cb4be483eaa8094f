// Which server URLs the plugin connects to (lib/server-url.js): plain http
// only to this machine, unless "I understand this is unencrypted" is ticked.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { isUnencrypted, NOT_HTTP, serverUrlProblem, UNENCRYPTED } from "../lib/server-url.js";

const LOCAL = [
  "http://localhost:8000",
  "http://127.0.0.1:8000",
  "http://127.1.2.3",
  "http://127.1", // the URL parser writes it 127.0.0.1
  "http://[::1]:8000",
  "http://[0:0:0:0:0:0:0:1]:8000", // written [::1]
  "  http://127.0.0.1:8000  ",
  "ws://127.0.0.1:8000/ws/plugin/",
];
const OTHER_MACHINES = [
  "http://192.168.1.20:8000",
  "http://10.0.0.5",
  "http://conductor.example",
  "http://localhost.example",
  "http://127.0.0.1.nip.io",
  "http://[::ffff:127.0.0.1]", // an IPv4-mapped address: not counted as local, so refused
  "http://[fe80::1]",
  "http://0.0.0.0:8000",
  "ws://192.168.1.20:8000/ws/plugin/",
  "HTTP://Conductor.Example",
];
const ENCRYPTED = ["https://conductor.example", "https://192.168.1.20:8443", "wss://conductor.example/ws/plugin/"];

describe("serverUrlProblem", () => {
  it("takes https, and plain http to this machine", () => {
    for (const url of [...LOCAL, ...ENCRYPTED]) assert.equal(serverUrlProblem(url), "", url);
  });

  it("refuses plain http to another machine unless the box is ticked", () => {
    for (const url of OTHER_MACHINES) {
      assert.equal(serverUrlProblem(url), UNENCRYPTED, url);
      assert.equal(serverUrlProblem(url, { isUnencryptedAccepted: false }), UNENCRYPTED, url);
      assert.equal(serverUrlProblem(url, { isUnencryptedAccepted: "yes" }), UNENCRYPTED, `${url}: only true ticks it`);
      assert.equal(serverUrlProblem(url, { isUnencryptedAccepted: true }), "", url);
      assert.equal(isUnencrypted(url), true, url);
    }
    assert.match(UNENCRYPTED, /I understand this is unencrypted/);
  });

  it("refuses what is not an http(s) URL, ticked or not", () => {
    for (const url of ["", "conductor.example", "ftp://conductor.example", "javascript:alert(1)", "file:///etc/passwd", null, undefined, 42]) {
      assert.equal(serverUrlProblem(url), NOT_HTTP, String(url));
      assert.equal(serverUrlProblem(url, { isUnencryptedAccepted: true }), NOT_HTTP, String(url));
    }
  });
});
