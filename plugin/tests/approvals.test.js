// Blocks waiting for approval (lib/approvals.js, lib/status.js's badge):
// each start told once, a block that waits again told again, the
// notification's text cleaned and bounded, and the count on the badge.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ApprovalWatch, approvalNotification, approvalsListUrl, approvalsWaitingNotification } from "../lib/approvals.js";
import { messageStatusOf } from "../lib/panel.js";
import { BADGES, badgeOf, countText } from "../lib/status.js";
import { MapStore } from "./stores.js";

function frame(id, statuses, extra = {}) {
  return {
    type: "instruction.status", platform: "claude", conversation_id: "c1", approvals_waiting: 1,
    message: {
      message_id: null, conductor_message_id: id, delivery: { status: "none" },
      blocks: statuses.map((status, i) => ({ index: i + 1, target: "conductor", tool: "shell.run", params_preview: '{"command": "ls"}', status, updated_at: 1, ...extra })),
    },
  };
}

describe("ApprovalWatch", () => {
  it("tells of a block once when it starts waiting", async () => {
    const watch = new ApprovalWatch(new MapStore());
    assert.deepEqual((await watch.started(frame("1", ["queued", "waiting_approval"]))).map((b) => b.index), [2]);
    assert.deepEqual(await watch.started(frame("1", ["running", "waiting_approval"])), []);
    assert.deepEqual((await watch.started(frame("2", ["waiting_approval"]))).map((b) => b.index), [1]);
  });

  it("tells again of a block that stopped waiting and waits again (a retry held for approval)", async () => {
    const watch = new ApprovalWatch(new MapStore());
    await watch.started(frame("1", ["waiting_approval"]));
    assert.deepEqual(await watch.started(frame("1", ["queued"])), []);
    assert.equal((await watch.started(frame("1", ["waiting_approval"]))).length, 1);
  });

  it("remembers across a restarted worker (its store), and frames at once lose nothing", async () => {
    const store = new MapStore();
    const first = new ApprovalWatch(store);
    const started = await Promise.all(["1", "2", "3"].map((id) => first.started(frame(id, ["waiting_approval"]))));
    assert.deepEqual(started.map((blocks) => blocks.length), [1, 1, 1]);
    const restarted = new ApprovalWatch(store);
    for (const id of ["1", "2", "3"]) assert.deepEqual(await restarted.started(frame(id, ["waiting_approval"])), []);
  });

  it("forgets the oldest past its limit, and ignores what it cannot read", async () => {
    const store = new MapStore();
    const watch = new ApprovalWatch(store, { limit: 2 });
    for (const id of ["1", "2", "3"]) await watch.started(frame(id, ["waiting_approval"]));
    assert.deepEqual((await store.get("approvalsSeen")).keys, ["2:1", "3:1"]);
    assert.deepEqual(await watch.started({ type: "instruction.status", message: "nope" }), []);
    await store.set("approvalsSeen", "garbage");
    assert.equal((await watch.started(frame("9", ["waiting_approval"]))).length, 1);
  });
});

describe("approvalNotification", () => {
  it("names the tool, the platform and the params, as text", () => {
    const [block] = messageStatusOf(frame("1", ["waiting_approval"]).message).blocks;
    assert.deepEqual(approvalNotification(block, { platform: "claude" }), {
      title: "shell.run waits for approval",
      message: 'In a claude conversation. {"command": "ls"} Approve it in Conductor (the side panel links to it).',
    });
  });

  it("cleans and bounds hostile strings", () => {
    const hostile = frame("1", ["waiting_approval"], { tool: `\u202e<img src=x onerror=alert(1)>${"t".repeat(500)}`, params_preview: "p".repeat(5000) });
    const [block] = messageStatusOf(hostile.message).blocks;
    const { title, message } = approvalNotification(block, { platform: "<b>x</b>\u202e" });
    assert.ok(title.startsWith("<img src=x onerror=alert(1)>"));
    assert.ok(Array.from(title).length <= 80 && Array.from(message).length <= 200);
    assert.doesNotMatch(title + message, /\u202e/);
    assert.ok(message.startsWith("In a <b>x</b> conversation."));
  });
});

describe("badgeOf with blocks waiting for approval", () => {
  it("shows the count in the state's colour while connected or connecting", () => {
    assert.deepEqual(badgeOf("connected", "", false, 3), { text: "3", color: BADGES.connected.color, title: "Conductor: connected; 3 blocks wait for approval" });
    assert.deepEqual(badgeOf("connecting", "reconnecting in 2 s", false, 1), {
      text: "1", color: BADGES.connecting.color, title: "Conductor: connecting (reconnecting in 2 s); 1 block waits for approval",
    });
    assert.equal(badgeOf("connected", "", true, 2).color, BADGES.outdated.color);
  });

  it("keeps the state's text with no count, or when the person must act on the state first", () => {
    assert.equal(badgeOf("connected", "", false, 0).text, BADGES.connected.text);
    for (const state of ["refused", "paused", "unconfigured"]) {
      assert.equal(badgeOf(state, "", false, 5).text, BADGES[state].text);
      assert.equal(badgeOf(state, "", false, 5).title, `Conductor: ${state}`);
    }
  });

  it("fits the count in three characters", () => {
    assert.equal(countText(7), "7");
    assert.equal(countText(99), "99");
    assert.equal(countText(100), "99+");
  });
});

describe("approvals.waiting", () => {
  it("names how many blocks wait, one or more", () => {
    assert.equal(approvalsWaitingNotification(1).title, "1 block waits for approval");
    assert.equal(approvalsWaitingNotification(3).title, "3 blocks wait for approval");
  });

  it("links to the approvals list on the paired server's origin only", () => {
    assert.equal(approvalsListUrl("https://conductor.example:8443/some/path"),
      "https://conductor.example:8443/admin/automation/automationtask/?status__exact=blocked");
    assert.equal(approvalsListUrl("javascript:alert(1)"), null);
    assert.equal(approvalsListUrl(undefined), null);
  });
});
