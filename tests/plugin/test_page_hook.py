"""The page hook's private port stays private from a page that replaces the built-ins the hook would use on it.

The page's first script (in its <head>, so after the hook, which the
manifest injects at document_start) wraps every built-in through which code
could reach a MessagePort: its methods, `addEventListener`, the `onmessage`
setter, `MessageEvent`'s `data` (whose event names the port as its target),
`Object.hasOwn`, `Function.prototype.call` and `apply`, `Reflect.apply`. Each
wrapper notes a port it is handed, then does what the built-in does.
"""

import json

import pytest

from tests.plugin.chat_apps import chat_app
from tests.plugin.test_plugin import BAA, BAA_HTML, paired

pytestmark = pytest.mark.database_free

PAGE_TAKES_OVER = """<script>
(() => {
  const reflectApply = Reflect.apply;
  const Port = MessagePort;
  window.__ports = [];
  window.__posted = [];
  const note = (where, ...values) => {
    if (values.some((value) => value instanceof Port)) window.__ports.push(where);
  };
  const wrap = (owner, name) => {
    const original = owner[name];
    owner[name] = function (...args) {
      note(name, this, ...args);
      if (name === "postMessage" && this instanceof Port) window.__posted.push(JSON.stringify(args[0] ?? null));
      return reflectApply(original, this, args);
    };
  };
  for (const name of ["postMessage", "start", "close"]) wrap(MessagePort.prototype, name);
  wrap(EventTarget.prototype, "addEventListener");
  wrap(Object, "hasOwn");
  wrap(Reflect, "apply");
  wrap(Function.prototype, "call");
  wrap(Function.prototype, "apply");
  const data = Object.getOwnPropertyDescriptor(MessageEvent.prototype, "data");
  Object.defineProperty(MessageEvent.prototype, "data", {
    configurable: true,
    get() { note("data", this.target, this.currentTarget); return reflectApply(data.get, this, []); },
  });
  const onmessage = Object.getOwnPropertyDescriptor(MessagePort.prototype, "onmessage");
  Object.defineProperty(MessagePort.prototype, "onmessage", {
    configurable: true,
    get() { note("onmessage", this); return reflectApply(onmessage.get, this, []); },
    set(handler) { note("onmessage", this); reflectApply(onmessage.set, this, [handler]); },
  });
})();
</script>"""


def test_a_page_that_replaces_the_ports_built_ins_neither_gets_the_port_nor_stops_capture_and_delivery(browser, server):
    paired(browser, server)
    app = chat_app("claude")
    app.page_head = lambda: PAGE_TAKES_OVER
    app.install(browser.context)
    page = browser.open_chat(app)

    app.answer_next(BAA)
    page.evaluate("mockChat.ask('What next?', {html: %s})" % json.dumps(BAA_HTML))
    [frame] = server.wait_for_frames("browser.final_message")
    assert (frame["capture"], frame["text"]) == ("network", BAA)  # the stream's events crossed the port

    request = {
        "method": "POST",
        "url": f"https://claude.ai/api/organizations/{app.organization}/chat_conversations/{app.conversation}/completion",
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"prompt": "```baa-result\n{}\n```", "parent_message_uuid": "p-1", "timezone": "UTC"}),
    }
    server.send({"type": "browser.proxy_delivery", "request_id": "r-1", "delivery_key": "task-1", "platform": "claude",
                 "conversation_id": app.conversation, "text": "results", "request": request, "timeout_ms": 10_000})
    [result] = server.wait_for_frames("browser.proxy_delivery.result")
    assert (result["ok"], result["status"]) == (True, 200), result  # the call and its reply crossed the port
    assert len(app.deliveries()) == 1

    assert page.evaluate("[window.__ports, window.__posted]") == [[], []]
    # The page's wrappers were in place all along: a port of its own is noted.
    page.evaluate("new MessageChannel().port1.postMessage('mine')")
    assert page.evaluate("[window.__ports, window.__posted]") == [["postMessage"], ['"mine"']]
