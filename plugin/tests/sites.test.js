// The sites read from the page (lib/sites.js): which descriptions are in
// force (built-in, the server's, a server-only site), when the plugin asks
// the server for them, what of its answer is kept, and which content
// scripts the sites switched on get.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { ADAPTERS, adapterByName, adapterForUrl, NETWORK_ADAPTERS, NETWORK_ORIGINS, useSites } from "../adapters/index.js";
import { helloFrame, MAX_HELLO_ADAPTERS } from "../lib/frames.js";
import { RESERVED_ORIGINS } from "../lib/site-description.js";
import {
  isLoadable, isSwitchedOn, matchPatterns, MAX_SITES, registrationPlan, siteRows, siteScript, sitesGetFrame, sitesInForce, sitesOn,
  storedSitesOf, switchedOnOf, switchOff, switchOn, withoutWithdrawn,
} from "../lib/sites.js";
import { SITE_NAMES } from "../sites/index.js";

const read = (name) => JSON.parse(readFileSync(new URL(`../sites/${name}.json`, import.meta.url), "utf8"));
const BUILT_IN = Object.fromEntries(SITE_NAMES.map((name) => [name, read(name)]));
const reservedOrigins = NETWORK_ORIGINS;
const MANIFEST = JSON.parse(readFileSync(new URL("../manifest.json", import.meta.url), "utf8"));
const ACCESSIBLE = MANIFEST.web_accessible_resources.flatMap((entry) => entry.matches);

/** A new site only a server knows, from a shipped one. */
function serverOnlySite() {
  const site = read("deepseek");
  return { ...site, name: "acme_chat", title: "Acme Chat", origins: ["https://chat.acme.test"] };
}

describe("the descriptions in force", () => {
  it("are the built-in ones when the server handed over none", () => {
    const { sites, dropped } = sitesInForce(BUILT_IN, undefined, { reservedOrigins });
    assert.deepEqual([...sites.keys()], [...SITE_NAMES].sort());
    assert.deepEqual(dropped, []);
    assert.ok(Object.isFrozen(sites.get("perplexity").answer));
  });

  it("take a valid stored description over the built-in one of its name", () => {
    const changed = read("perplexity");
    changed.answer.streaming = ["[data-testid=\"stop-button\"]"];
    const { sites } = sitesInForce(BUILT_IN, { version: "v2", descriptions: { perplexity: changed } }, { reservedOrigins });
    assert.deepEqual(sites.get("perplexity").answer.streaming, ["[data-testid=\"stop-button\"]"]);
    assert.deepEqual(sites.get("grok").answer, BUILT_IN.grok.answer);
  });

  it("keep the built-in one when the stored one does not validate, and say why", () => {
    const broken = read("perplexity");
    broken.answer.streaming = ["<script>alert(1)</script>"];
    const { sites, dropped } = sitesInForce(BUILT_IN, { version: "v2", descriptions: { perplexity: broken } }, { reservedOrigins });
    assert.deepEqual(sites.get("perplexity").answer.streaming, BUILT_IN.perplexity.answer.streaming);
    assert.equal(dropped.length, 1);
    assert.equal(dropped[0].name, "perplexity");
    assert.match(dropped[0].problems[0], /^stored: \$\.answer\.streaming\[0\]/);
  });

  it("add a site only the server knows", () => {
    const { sites } = sitesInForce(BUILT_IN, { version: "v3", descriptions: { acme_chat: serverOnlySite() } }, { reservedOrigins });
    assert.equal(sites.size, SITE_NAMES.length + 1);
    assert.equal(sites.get("acme_chat").title, "Acme Chat");
  });

  it("refuse a description stored under another name, or taking a network adapter's or another site's origin", () => {
    const stolen = { ...serverOnlySite(), name: "copycat", origins: ["https://claude.ai"] };
    const twin = { ...serverOnlySite(), name: "zz_twin", origins: ["https://chat.deepseek.com"] };
    const misnamed = serverOnlySite();
    const { sites, dropped } = sitesInForce(BUILT_IN, { version: "v", descriptions: { copycat: stolen, zz_twin: twin, other: misnamed } }, { reservedOrigins });
    assert.deepEqual(dropped.map((entry) => entry.name).sort(), ["copycat", "other", "zz_twin"]);
    assert.ok(sites.has("deepseek") && !sites.has("zz_twin") && !sites.has("copycat"));
  });

  it("keep the built-in owner of an origin: a server's description claiming it is refused and reported, whatever its name", () => {
    // "aaa_reader" sorts before "copilot": the old rule gave it github.com, and the grant the person gave Copilot.
    for (const name of ["aaa_reader", "zz_reader"]) {
      const reader = { ...serverOnlySite(), name, title: "Reader", origins: ["https://github.com"] };
      const { sites, dropped } = sitesInForce(BUILT_IN, { version: "v", descriptions: { [name]: reader } }, { reservedOrigins });
      assert.ok(!sites.has(name), name);
      assert.deepEqual(sites.get("copilot").origins, ["https://github.com"]);
      assert.deepEqual(dropped, [{ name, problems: ["stored: $.origins: https://github.com is claimed by copilot too: an origin belongs to one site"] }]);
    }
  });

  it("refuse both of the server's descriptions that claim one origin, in either order, and keep the built-in one of a name", () => {
    const one = { ...serverOnlySite(), name: "acme_one", origins: ["https://chat.acme.test"] };
    const two = { ...serverOnlySite(), name: "acme_two", origins: ["https://chat.acme.test", "https://two.acme.test"] };
    for (const descriptions of [{ acme_one: one, acme_two: two }, { acme_two: two, acme_one: one }]) {
      const { sites, dropped } = sitesInForce(BUILT_IN, { version: "v", descriptions }, { reservedOrigins });
      assert.ok(!sites.has("acme_one") && !sites.has("acme_two"));
      assert.deepEqual(dropped.map((entry) => entry.name).sort(), ["acme_one", "acme_two"]);
    }
    // The server's copilot and a reader on its origin: both refused, the plugin's own copilot stays in force.
    const copilot = { ...read("copilot"), title: "Copilot (the server's)" };
    const reader = { ...serverOnlySite(), name: "gh_reader", origins: ["https://github.com"] };
    const { sites, dropped } = sitesInForce(BUILT_IN, { version: "v", descriptions: { copilot, gh_reader: reader } }, { reservedOrigins });
    assert.equal(sites.get("copilot").title, "GitHub Copilot");
    assert.ok(!sites.has("gh_reader"));
    assert.deepEqual(dropped.map((entry) => entry.name).sort(), ["copilot", "gh_reader"]);
  });

  it("let the server move a site off an origin and give it to another", () => {
    const copilot = { ...read("copilot"), origins: ["https://copilot.acme.test"] };
    const reader = { ...serverOnlySite(), name: "gh_reader", origins: ["https://github.com"] };
    const { sites, dropped } = sitesInForce(BUILT_IN, { version: "v", descriptions: { copilot, gh_reader: reader } }, { reservedOrigins });
    assert.deepEqual(dropped, []);
    assert.deepEqual(sites.get("copilot").origins, ["https://copilot.acme.test"]);
    assert.deepEqual(sites.get("gh_reader").origins, ["https://github.com"]);
  });

  it("leave out both of two built-in descriptions on one origin, and any on an adapter's origin", () => {
    const twin = { ...read("grok"), name: "grok_twin" };
    const { sites, dropped } = sitesInForce({ grok: read("grok"), grok_twin: twin, kimi: read("kimi") }, undefined, { reservedOrigins });
    assert.deepEqual([...sites.keys()], ["kimi"]);
    assert.deepEqual(dropped.map((entry) => entry.name).sort(), ["grok", "grok_twin"]);
    const onClaude = { ...serverOnlySite(), name: "copycat", origins: ["https://claude.ai"] };
    const refused = sitesInForce({}, { version: "v", descriptions: { copycat: onClaude } }, { reservedOrigins });
    assert.equal(refused.sites.size, 0);
    assert.match(refused.dropped[0].problems[0], /^stored: \$\.origins\[0\]: the origin of an adapter with network capture/);
  });

  it("are shipped on origins of their own, none an adapter's, the schema's list of those being the adapters'", () => {
    const owners = new Map();
    for (const description of Object.values(BUILT_IN)) {
      for (const origin of description.origins) {
        assert.ok(!owners.has(origin), `${origin}: ${owners.get(origin)} and ${description.name}`);
        owners.set(origin, description.name);
      }
    }
    for (const origin of NETWORK_ORIGINS) assert.ok(!owners.has(origin), origin);
    const schema = read("schema");
    assert.deepEqual([...schema.$defs.origin.not.enum].sort(), [...NETWORK_ORIGINS].sort());
    assert.deepEqual([...RESERVED_ORIGINS].sort(), [...NETWORK_ORIGINS].sort());
  });

  it("are the adapters in force once used, the three first, and the hello names at most 16", () => {
    const many = Array.from({ length: 20 }, (_, i) => ({ ...serverOnlySite(), name: `site_${i}`, origins: [`https://s${i}.acme.test`] }));
    const { sites } = sitesInForce(BUILT_IN, { version: "v", descriptions: Object.fromEntries(many.map((d) => [d.name, d])) }, { reservedOrigins });
    useSites(sites.values());
    try {
      assert.deepEqual(ADAPTERS.slice(0, 3), [...NETWORK_ADAPTERS]);
      assert.equal(adapterByName("perplexity").description.title, "Perplexity");
      assert.equal(adapterForUrl("https://chat.deepseek.com/a/chat/s/x")?.name, "deepseek");
      const hello = helloFrame({ clientId: "c", token: "t", version: "1", adapters: ADAPTERS });
      assert.equal(hello.platforms.length, MAX_HELLO_ADAPTERS);
      assert.equal(Object.keys(hello.adapters).length, MAX_HELLO_ADAPTERS);
      assert.deepEqual(hello.platforms.slice(0, 3), ["claude", "chatgpt", "gemini"]);
    } finally {
      useSites([]);
    }
    assert.equal(adapterForUrl("https://chat.deepseek.com/"), null);
  });
});

describe("asking the server", () => {
  it("sends sites.get only when hello.ok names a version other than the stored one", () => {
    assert.deepEqual(sitesGetFrame({ type: "hello.ok", sites_version: "v2" }, "v1", "q1"), { type: "sites.get", id: "q1" });
    assert.deepEqual(sitesGetFrame({ type: "hello.ok", sites_version: "v2" }, undefined, "q1"), { type: "sites.get", id: "q1" });
    assert.equal(sitesGetFrame({ type: "hello.ok", sites_version: "v2" }, "v2", "q1"), null);
    assert.equal(sitesGetFrame({ type: "hello.ok" }, "v1", "q1"), null, "an older server names none");
    assert.equal(sitesGetFrame({ type: "hello.ok", sites_version: 3 }, "v1", "q1"), null);
    assert.equal(sitesGetFrame({ type: "hello.ok", sites_version: "" }, "v1", "q1"), null);
  });

  it("keeps the valid descriptions of the answer and its version, and drops the others", () => {
    const broken = { ...read("grok"), composer: { ...read("grok").composer, input: ["javascript:alert(1)"] } };
    const huge = { ...serverOnlySite(), name: "huge", origins: ["https://huge.acme.test"], uncertain: Array(12).fill("x".repeat(300)) };
    const long = (prefix) => Array.from({ length: 12 }, (_, i) => `.${prefix}${i}`.padEnd(300, "x"));
    huge.answer = { ...huge.answer, turn: long("t"), text: long("x"), streaming: long("s"), finished: long("f") };
    const result = storedSitesOf({ type: "sites", id: "q1", sites_version: "v2", sites: [read("perplexity"), broken, serverOnlySite(), huge, read("perplexity"), "not one"] });
    assert.equal(result.stored.version, "v2");
    assert.deepEqual(Object.keys(result.stored.descriptions), ["perplexity", "acme_chat"]);
    assert.deepEqual(result.dropped.map((entry) => entry.name), ["grok", "huge", "perplexity", "#5"]);
    assert.match(result.dropped[1].problems[0], /bytes, over 16384/);
  });

  it("takes at most 64 sites, and nothing of a frame that is not an answer", () => {
    const sites = Array.from({ length: MAX_SITES + 1 }, (_, i) => ({ ...serverOnlySite(), name: `site_${i}`, origins: [`https://s${i}.acme.test`] }));
    const result = storedSitesOf({ type: "sites", sites_version: "v", sites });
    assert.equal(Object.keys(result.stored.descriptions).length, MAX_SITES);
    assert.deepEqual(result.dropped.map((entry) => entry.name), [`site_${MAX_SITES}`]);
    assert.equal(storedSitesOf({ type: "sites", sites_version: "v" }), null);
    assert.equal(storedSitesOf({ type: "sites", sites: [] }), null);
    assert.equal(storedSitesOf({ type: "error", sites_version: "v", sites: [] }), null);
  });
});

describe("the content scripts of the sites switched on", () => {
  const { sites } = sitesInForce(BUILT_IN, undefined, { reservedOrigins });

  it("is the isolated-world entry for the site's origins, at document_start, no MAIN-world hook", () => {
    assert.deepEqual(siteScript(sites.get("perplexity")), {
      id: "site-perplexity",
      matches: ["https://www.perplexity.ai/*", "https://perplexity.ai/*"],
      js: ["/content/site-relay.js"],
      runAt: "document_start",
      allFrames: false,
      world: "ISOLATED",
      persistAcrossSessions: true,
    });
  });

  it("registers the sites switched on and not registered, unregisters those switched off, leaves the rest", () => {
    const isOn = (name) => name === "perplexity" || name === "copilot";
    const registered = [siteScript(sites.get("copilot")), siteScript(sites.get("grok")), { id: "someone-else", matches: ["https://x.test/*"] }];
    const plan = registrationPlan({ sites, isOn, registered });
    assert.deepEqual(plan.unregister, ["site-grok"]);
    assert.deepEqual(plan.register.map((script) => script.id), ["site-perplexity"]);
  });

  it("registers again a script whose site's origins changed, and drops one of a site no longer known", () => {
    const moved = { ...siteScript(sites.get("copilot")), matches: ["https://old.copilot.test/*"] };
    const gone = { ...siteScript(sites.get("copilot")), id: "site-acme_chat" };
    const plan = registrationPlan({ sites, isOn: (name) => name === "copilot", registered: [moved, gone] });
    assert.deepEqual(plan.unregister, ["site-acme_chat", "site-copilot"]);
    assert.deepEqual(plan.register, [siteScript(sites.get("copilot"))]);
  });

  it("changes nothing when the registered scripts are those of the sites switched on", () => {
    const plan = registrationPlan({ sites, isOn: (name) => name === "kimi", registered: [siteScript(sites.get("kimi"))] });
    assert.deepEqual(plan, { unregister: [], register: [] });
  });

  it("reads a registered file with or without its leading slash as the same (browsers read it back either way)", () => {
    const registered = [{ ...siteScript(sites.get("kimi")), js: ["content/site-relay.js"] }];
    assert.deepEqual(registrationPlan({ sites, isOn: (name) => name === "kimi", registered }), { unregister: [], register: [] });
  });

  it("lists every known site for the options page, by title, with its origins and switch", () => {
    const rows = siteRows(sites, (name) => name === "deepseek", ACCESSIBLE);
    assert.equal(rows.length, SITE_NAMES.length);
    assert.deepEqual(rows.find((row) => row.name === "deepseek"), { name: "deepseek", title: "DeepSeek", origins: ["https://chat.deepseek.com"], isOn: true, isLoadable: true });
    assert.deepEqual(rows.map((row) => row.title), [...rows.map((row) => row.title)].sort((a, b) => a.localeCompare(b, "en")));
  });
});

describe("the sites switched on", () => {
  const { sites } = sitesInForce(BUILT_IN, undefined, { reservedOrigins });
  const copilot = sites.get("copilot");
  const on = (switchedOn, granted, accessiblePatterns = ACCESSIBLE) => [...sitesOn({ sites, switchedOn, granted: new Set(granted), accessiblePatterns })];

  it("turns nothing on for a grant alone: only the person's switch, with the grant, does", () => {
    assert.deepEqual(on({}, ["copilot", "grok"]), []);
    const switchedOn = switchOn({}, copilot);
    assert.deepEqual(switchedOn, { copilot: { origins: ["https://github.com"] } });
    assert.deepEqual(on(switchedOn, ["copilot", "grok"]), ["copilot"]);
    assert.deepEqual(on(switchedOn, []), [], "switched on, its grant not given (or taken back)");
    assert.deepEqual(on(switchedOn, ["copilot"], []), [], "switched on, the plugin's modules not loadable there");
  });

  it("holds a switch to the origins it was given for: a description grown since is off, one shrunk stays on", () => {
    const switchedOn = switchOn({}, copilot);
    assert.equal(isSwitchedOn(switchedOn, copilot), true);
    assert.equal(isSwitchedOn(switchedOn, { ...copilot, origins: ["https://github.com", "https://gist.github.com"] }), false);
    const perplexity = sites.get("perplexity");
    const both = switchOn({}, perplexity);
    assert.equal(isSwitchedOn(both, { ...perplexity, origins: ["https://www.perplexity.ai"] }), true);
    assert.equal(isSwitchedOn(both, { ...perplexity, name: "other" }), false, "a switch is a site's, by name");
  });

  it("switches on and off without changing the value it was given, and reads a stored value defensively", () => {
    const before = switchOn({}, sites.get("grok"));
    const after = switchOn(before, copilot);
    assert.deepEqual(Object.keys(before), ["grok"]);
    assert.deepEqual(Object.keys(switchOff(after, "grok")), ["copilot"]);
    assert.deepEqual(switchOff(after, "kimi"), after);
    assert.deepEqual(switchedOnOf(undefined), {});
    assert.deepEqual(switchedOnOf(["copilot"]), {});
    assert.deepEqual(switchedOnOf({ copilot: true, grok: { origins: "https://grok.com" }, kimi: { origins: [1, "https://www.kimi.com"] } }), {
      kimi: { origins: ["https://www.kimi.com"] },
    });
    assert.equal(isSwitchedOn(switchedOnOf({ toString: { origins: ["x"] } }), copilot), false);
  });

  it("switches a site off once its grant is taken back, so that a later grant does not turn it on again", () => {
    const switchedOn = switchOn(switchOn({ gone_site: { origins: ["https://gone.test"] } }, copilot), sites.get("grok"));
    const kept = withoutWithdrawn({ sites, switchedOn, granted: new Set(["grok"]) });
    assert.deepEqual(Object.keys(kept).sort(), ["gone_site", "grok"]);
    assert.deepEqual(on(kept, ["copilot", "grok"]), ["grok"]);
    assert.equal(withoutWithdrawn({ sites, switchedOn: kept, granted: new Set(["grok"]) }), kept, "nothing to change: the same value");
  });
});

describe("the manifest", () => {
  const { sites } = sitesInForce(BUILT_IN, undefined, { reservedOrigins });

  it("keeps static content scripts and host permissions to the three adapters with network capture", () => {
    const three = NETWORK_ORIGINS.map((origin) => `${origin}/*`);
    assert.deepEqual(MANIFEST.host_permissions, three);
    for (const script of MANIFEST.content_scripts) assert.deepEqual(script.matches, three);
    assert.ok(MANIFEST.permissions.includes("scripting"));
  });

  it("lets the plugin's modules load on every shipped site, and on no other website", () => {
    for (const description of sites.values()) assert.ok(isLoadable(description, ACCESSIBLE), description.name);
    const expected = [...NETWORK_ORIGINS.map((origin) => `${origin}/*`), ...[...sites.values()].flatMap(matchPatterns)];
    assert.deepEqual([...ACCESSIBLE].sort(), expected.sort());
    assert.ok(MANIFEST.web_accessible_resources.every((entry) => !entry.resources.some((resource) => resource.startsWith("sites/"))));
  });

  it("leaves a site the server added on another origin off, listed", () => {
    assert.equal(isLoadable(serverOnlySite(), ACCESSIBLE), false);
    const { sites: withNew } = sitesInForce(BUILT_IN, { version: "v", descriptions: { acme_chat: serverOnlySite() } }, { reservedOrigins });
    assert.equal(siteRows(withNew, () => false, ACCESSIBLE).find((row) => row.name === "acme_chat").isLoadable, false);
  });
});
