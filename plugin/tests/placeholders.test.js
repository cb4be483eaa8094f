import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { fillPageValues, MissingPageValue, placeholderNames } from "../lib/placeholders.js";

const jsonRequest = {
  method: "POST",
  url: "https://claude.ai/api/organizations/{{page:org_uuid}}/chat_conversations/c1/completion",
  headers: {
    "Content-Type": "application/json",
    Authorization: "Bearer {{page:access_token}}",
    "anthropic-device-id": "{{page:device_id}}",
  },
  body: '{"prompt":"hi","timezone":"{{page:timezone}}","locale":"{{page:locale}}"}',
};

describe("placeholderNames", () => {
  it("lists every name once, sorted, from the URL, headers and body", () => {
    assert.deepEqual(placeholderNames(jsonRequest), ["access_token", "device_id", "locale", "org_uuid", "timezone"]);
  });

  it("does not see a placeholder the server escaped in delivered text", () => {
    const request = { ...jsonRequest, headers: {}, url: "https://x.test/", body: '{"prompt":"\\u007b\\u007bpage:access_token}}"}' };
    assert.deepEqual(placeholderNames(request), []);
  });
});

describe("fillPageValues", () => {
  const values = { org_uuid: "org 1/2", access_token: "tok", device_id: "dev", timezone: 'Europe/"Paris"\\', locale: "fr-FR" };

  it("escapes JSON string content, percent-encodes the URL and leaves headers as they are", () => {
    const filled = fillPageValues(jsonRequest, values);
    assert.equal(filled.url, "https://claude.ai/api/organizations/org%201%2F2/chat_conversations/c1/completion");
    assert.equal(filled.headers.Authorization, "Bearer tok");
    assert.equal(filled.headers["anthropic-device-id"], "dev");
    assert.deepEqual(JSON.parse(filled.body), { prompt: "hi", timezone: 'Europe/"Paris"\\', locale: "fr-FR" });
    assert.equal(filled.method, "POST");
  });

  const cases = [
    // [what, value, form body, JSON body]
    ["reserved characters as Python's quote(safe='') does", "a b&c=d+e!'()*~", "a%20b%26c%3Dd%2Be%21%27%28%29%2A~", "a b&c=d+e!'()*~"],
    ["non-ASCII", "é👍", "%C3%A9%F0%9F%91%8D", "é👍"],
    ["quotes and control characters", 'x"\n\t', "x%22%0A%09", 'x\\"\\n\\t'],
    ["a value that looks like a placeholder, not filled again", "{{page:access_token}}", "%7B%7Bpage%3Aaccess_token%7D%7D", "{{page:access_token}}"],
  ];
  for (const [what, value, form, json] of cases) {
    it(`encodes ${what}`, () => {
      const formRequest = { method: "POST", url: "https://x.test/", headers: { "content-type": "application/x-www-form-urlencoded;charset=utf-8" }, body: "at={{page:v}}" };
      assert.equal(fillPageValues(formRequest, { v: value, access_token: "SECRET" }).body, `at=${form}`);
      const request = { method: "POST", url: "https://x.test/", headers: { "Content-Type": "application/json" }, body: '{"a":"{{page:v}}"}' };
      const filled = fillPageValues(request, { v: value, access_token: "SECRET" });
      assert.equal(filled.body, `{"a":"${json}"}`);
      assert.equal(JSON.parse(filled.body).a, value);
    });
  }

  it("drops a header whose whole value is a placeholder the page has no value for, or an empty one", () => {
    for (const pageValues of [{ ...values, device_id: "" }, Object.fromEntries(Object.entries(values).filter(([k]) => k !== "device_id"))]) {
      const filled = fillPageValues(jsonRequest, pageValues);
      assert.equal("anthropic-device-id" in filled.headers, false);
      assert.equal(filled.headers.Authorization, "Bearer tok");
    }
  });

  const missing = [
    ["the URL", "org_uuid"],
    ["a header with more than the placeholder", "access_token"],
    ["the body", "locale"],
  ];
  for (const [where, name] of missing) {
    it(`throws MissingPageValue for a value missing from ${where}`, () => {
      const pageValues = { ...values };
      delete pageValues[name];
      assert.throws(() => fillPageValues(jsonRequest, pageValues), (error) => {
        assert.ok(error instanceof MissingPageValue);
        assert.equal(error.valueName, name);
        assert.equal(error.code, "page_value_missing");
        return true;
      });
    });
  }

  it("takes only own string values (not inherited properties, not numbers)", () => {
    const request = { method: "GET", url: "https://x.test/{{page:constructor}}", headers: {}, body: "" };
    assert.throws(() => fillPageValues(request, {}), MissingPageValue);
    assert.throws(() => fillPageValues({ ...request, url: "https://x.test/{{page:n}}" }, { n: 5 }), MissingPageValue);
  });

  it("fills an empty string into the body (only whole-value headers are dropped)", () => {
    const request = { method: "POST", url: "https://x.test/", headers: {}, body: '{"a":"{{page:v}}"}' };
    assert.equal(fillPageValues(request, { v: "" }).body, '{"a":""}');
  });

  it("leaves the delivered text's escaped braces alone, so no token reaches the chat", () => {
    const request = {
      method: "POST",
      url: "https://chatgpt.com/backend-api/f/conversation",
      headers: { "Content-Type": "application/json", Authorization: "Bearer {{page:access_token}}" },
      body: '{"parts":["see \\u007b\\u007bpage:access_token}} and \\u007b{page:access_token}}"]}',
    };
    const filled = fillPageValues(request, { access_token: "SECRET" });
    assert.equal(filled.body, request.body);
    assert.deepEqual(JSON.parse(filled.body).parts, ["see {{page:access_token}} and {{page:access_token}}"]);
    assert.equal(filled.headers.Authorization, "Bearer SECRET");
  });
});
