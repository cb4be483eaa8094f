import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { BADGES, badgeOf, nextStatus, RECENT_ACKS, withAck, withAttempt } from "../lib/status.js";

describe("nextStatus", () => {
  it("keeps `since` while the state stays, and the attempts always", () => {
    const first = nextStatus({ attempts: 3 }, { state: "connecting" }, 1000);
    assert.deepEqual(first, { attempts: 3, state: "connecting", detail: "", reason: "", since: 1000, at: 1000 });
    const again = nextStatus(first, { state: "connecting", detail: "reconnecting in 2 s", reason: "unreachable" }, 5000);
    assert.equal(again.since, 1000);
    assert.equal(again.at, 5000);
    assert.equal(again.reason, "unreachable");
    assert.equal(nextStatus(again, { state: "connected" }, 9000).since, 9000);
    assert.equal(nextStatus(again, { state: "connected" }, 9000).reason, "");
  });
});

describe("badgeOf", () => {
  it("shows each state's badge and says the detail in the title", () => {
    for (const state of ["connected", "connecting", "refused", "paused", "unconfigured"]) {
      const badge = badgeOf(state, "", false);
      assert.equal(badge.text, BADGES[state].text);
      assert.equal(badge.title, `Conductor: ${state}`);
    }
    assert.equal(badgeOf("paused", "paused from the popup", false).title, "Conductor: paused (paused from the popup)");
  });

  it("shows an outdated plugin only while connected", () => {
    assert.deepEqual(badgeOf("connected", "", true), { ...BADGES.outdated, title: "Conductor: connected (update the extension)" });
    assert.equal(badgeOf("connecting", "", true).text, BADGES.connecting.text);
  });
});

describe("withAttempt and withAck", () => {
  it("counts attempts", () => {
    assert.deepEqual(withAttempt(withAttempt({ state: "connecting" }, 1), 2), { state: "connecting", attempts: 2, lastAttemptAt: 2 });
  });

  it("keeps the recent acks, newest last", () => {
    let acks;
    for (let i = 0; i < RECENT_ACKS + 5; i++) acks = withAck(acks, { id: String(i), ms: i, at: i });
    assert.equal(acks.length, RECENT_ACKS);
    assert.equal(acks[0].id, "5");
    assert.equal(acks.at(-1).id, String(RECENT_ACKS + 4));
  });
});
