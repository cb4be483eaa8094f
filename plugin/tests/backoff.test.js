import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { reconnectDelay } from "../lib/backoff.js";

describe("reconnectDelay", () => {
  const table = [
    // attempt, random, expected ms
    [0, 0, 0],
    [0, 0.5, 500],
    [0, 0.999999, 999],
    [1, 0.5, 1000],
    [3, 0.25, 2000],
    [6, 0.999999, 59999], // 64 s capped to 60 s
    [50, 0.5, 30000], // a huge attempt stays under the cap
    [Infinity, 0.5, 500], // nonsense attempts count as the first
    [-3, 0.5, 500],
  ];
  for (const [attempt, random, expected] of table) {
    it(`attempt ${attempt} with random ${random} waits ${expected} ms`, () => {
      assert.equal(reconnectDelay(attempt, { random: () => random }), expected);
    });
  }

  it("stays within [0, min(cap, base * 2^attempt)] for any random value", () => {
    for (let attempt = 0; attempt < 40; attempt++) {
      const ceiling = Math.min(60000, 1000 * 2 ** attempt);
      for (const random of [0, 0.3, 0.999999, 1, 7, -1, Number.NaN]) {
        const delay = reconnectDelay(attempt, { random: () => random });
        assert.ok(Number.isInteger(delay) && delay >= 0 && delay <= ceiling, `${attempt} ${random} -> ${delay}`);
      }
    }
  });

  it("takes its base and cap", () => {
    assert.equal(reconnectDelay(2, { baseMs: 100, capMs: 300, random: () => 0.999999 }), 299);
    assert.equal(reconnectDelay(1, { baseMs: 100, capMs: 300, random: () => 0.5 }), 100);
  });
});
