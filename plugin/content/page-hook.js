/*
 * Conductor's MAIN-world hook (a classic script, run at document_start,
 * before any script of the page).
 *
 * It knows no platform. The isolated side (content/main.js) names the
 * requests to watch (method and URL pattern); for each one the page makes
 * through `fetch` or `XMLHttpRequest`, the hook passes the request's URL and
 * body, the response's decoded text in chunks, and how it ended (`end` with
 * the status, or `abort`). It also runs requests for the isolated side with
 * the page's own `fetch` (so the page's cookies and origin apply) and reads
 * page globals by a dotted path.
 *
 * The two sides talk over a MessageChannel whose port is handed over once,
 * at document_start, before the page's own scripts run. The hook never sees
 * the plugin's token or settings: nothing of them crosses to this world.
 *
 * The page shares this world: after this script, its scripts may replace any
 * built-in, and a method the hook looked up on its port when it posts (say
 * `MessagePort.prototype.postMessage`) would be the page's, which would then
 * hold the port and could read what crosses it, answer the isolated side's
 * calls (a proxy delivery's "200") or forge stream events. So the hook takes
 * every built-in it uses on the port and on the events that arrive there
 * first thing, while only the browser's own exist (the manifest injects this
 * file at document_start in the MAIN world: Chrome runs it before any script
 * of the page), and calls only those references afterwards. What a request
 * made in the page answers is not guarded that way: the page's own service
 * worker may answer it whatever the hook does; the port is what it keeps.
 */
(() => {
  "use strict";

  const apply = Reflect.apply;
  /** `method` as a function taking its `this` first, immune to later changes of `Function.prototype.call`. */
  const uncurried = (method) => Function.prototype.call.bind(method);
  const hasOwn = Object.hasOwn;
  const channel = new MessageChannel();
  const port = channel.port1;
  const postOnPort = MessagePort.prototype.postMessage.bind(port);
  const listenOnPort = EventTarget.prototype.addEventListener.bind(port);
  const startPort = MessagePort.prototype.start.bind(port);
  const messageData = uncurried(Object.getOwnPropertyDescriptor(MessageEvent.prototype, "data").get);

  const HANDSHAKE = "conductor:hook-port";
  /** The result body handed back is bounded; the server refuses frames over 1 MiB. */
  const MAX_RESULT_BODY_CHARS = 256 * 1024;
  const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);

  const pageFetch = window.fetch;
  const xhrOpen = XMLHttpRequest.prototype.open;
  const xhrSend = XMLHttpRequest.prototype.send;
  /** @type {{method: string, pattern: RegExp}[]} */
  let watched = [];
  let nextStreamId = 1;

  function isWatched(method, url) {
    const upper = String(method || "GET").toUpperCase();
    return watched.some((request) => request.method === upper && request.pattern.test(url));
  }

  function absoluteUrl(url) {
    try {
      return new URL(String(url), location.href).href;
    } catch {
      return "";
    }
  }

  function post(message) {
    try {
      postOnPort(message);
    } catch {
      // A value that cannot be cloned is dropped rather than breaking the page.
    }
  }

  /** Text bodies only: the apps send JSON or form strings; anything else is not read. */
  function bodyText(body) {
    if (typeof body === "string") return body;
    if (body instanceof URLSearchParams) return body.toString();
    return null;
  }

  /** Reads a watched response's copy to its end, passing decoded chunks on. */
  async function follow(streamId, response) {
    if (!response.body) {
      post({ kind: "stream", phase: "end", id: streamId, status: response.status, content_type: response.headers.get("content-type") ?? "" });
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const text = decoder.decode(value, { stream: true });
        if (text) post({ kind: "stream", phase: "chunk", id: streamId, text });
      }
      const rest = decoder.decode();
      if (rest) post({ kind: "stream", phase: "chunk", id: streamId, text: rest });
      post({ kind: "stream", phase: "end", id: streamId, status: response.status, content_type: response.headers.get("content-type") ?? "" });
    } catch (error) {
      // The page aborted (its stop button), or the connection broke: not final.
      post({ kind: "stream", phase: "abort", id: streamId, reason: String(error?.name || error) });
    }
  }

  async function watchedFetch(input, init) {
    const request = input instanceof Request ? input : null;
    const url = absoluteUrl(request ? request.url : input);
    const method = init?.method || request?.method || "GET";
    if (!watched.length || !isWatched(method, url)) return apply(pageFetch, this ?? window, arguments);
    const streamId = nextStreamId++;
    let body = bodyText(init?.body);
    if (body === null && request && init?.body === undefined) {
      body = await request.clone().text().catch(() => null);
    }
    post({ kind: "stream", phase: "start", id: streamId, url, body, page_url: location.href });
    let response;
    try {
      response = await apply(pageFetch, this ?? window, arguments);
    } catch (error) {
      post({ kind: "stream", phase: "abort", id: streamId, reason: String(error?.name || error) });
      throw error;
    }
    // The page keeps the original response untouched; the hook reads a copy.
    let copy = null;
    try {
      copy = response.clone();
    } catch {
      post({ kind: "stream", phase: "abort", id: streamId, reason: "unreadable" });
    }
    if (copy) follow(streamId, copy);
    return response;
  }

  // Keep the wrapper looking like the function it replaces to the page's own checks.
  Object.defineProperty(watchedFetch, "name", { value: "fetch" });
  window.fetch = watchedFetch;

  XMLHttpRequest.prototype.open = function open(method, url) {
    this.__conductorRequest = { method: String(method || "GET"), url: absoluteUrl(url) };
    return apply(xhrOpen, this, arguments);
  };

  XMLHttpRequest.prototype.send = function send(body) {
    const request = this.__conductorRequest;
    if (request && watched.length && isWatched(request.method, request.url)) followXhr(this, request, body);
    return apply(xhrSend, this, arguments);
  };

  /** The same events for a request made with XMLHttpRequest (Gemini's page library uses it). */
  function followXhr(xhr, request, body) {
    const streamId = nextStreamId++;
    let seen = 0;
    let isOver = false;
    post({ kind: "stream", phase: "start", id: streamId, url: request.url, body: bodyText(body), page_url: location.href });
    const readMore = () => {
      if (xhr.responseType !== "" && xhr.responseType !== "text") return;
      const text = xhr.responseText;
      if (text.length > seen) {
        post({ kind: "stream", phase: "chunk", id: streamId, text: text.slice(seen) });
        seen = text.length;
      }
    };
    const finish = (phase) => () => {
      if (isOver) return;
      isOver = true;
      if (phase === "end") {
        readMore();
        post({ kind: "stream", phase: "end", id: streamId, status: xhr.status, content_type: xhr.getResponseHeader("content-type") ?? "" });
      } else {
        post({ kind: "stream", phase: "abort", id: streamId, reason: phase });
      }
    };
    xhr.addEventListener("progress", readMore);
    xhr.addEventListener("load", finish("end"));
    xhr.addEventListener("abort", finish("abort"));
    xhr.addEventListener("error", finish("error"));
    xhr.addEventListener("timeout", finish("timeout"));
  }

  /** A value of the page at a dotted path from `window`, JSON-cloned, or undefined. */
  function readGlobal(path) {
    let value = window;
    for (const key of String(path).split(".")) {
      if (FORBIDDEN_KEYS.has(key) || value === null || value === undefined) return undefined;
      value = value[key];
    }
    try {
      return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
    } catch {
      return undefined;
    }
  }

  /**
   * Makes a delivery's request with the page's own fetch (so the app's
   * stream of its answer is watched like any other), and answers with the
   * status and the start of the body once the body ended or `answerWithinMs`
   * passed, whichever is first: the answer to a delivery is the app's whole
   * next reply, which may stream for longer than the server waits.
   */
  async function proxyFetch({ method, url, headers, body, timeoutMs, answerWithinMs }) {
    const controller = new AbortController();
    const abortTimer = setTimeout(() => controller.abort(), timeoutMs);
    try {
      const response = await watchedFetch(url, {
        method,
        headers,
        body: method === "GET" || method === "HEAD" ? undefined : body,
        credentials: "include",
        signal: controller.signal,
      });
      clearTimeout(abortTimer);
      const text = await readBounded(response, answerWithinMs);
      return { status: response.status, body: text };
    } catch (error) {
      clearTimeout(abortTimer);
      return { error: `the request failed in the page: ${String(error?.message || error)}` };
    }
  }

  async function readBounded(response, withinMs) {
    if (!response.body) return "";
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const pieces = [];
    let length = 0;
    let timer;
    const deadline = new Promise((resolve) => {
      timer = setTimeout(() => resolve({ done: true, late: true }), withinMs);
    });
    try {
      for (;;) {
        const { done, value, late } = await Promise.race([reader.read(), deadline]);
        if (done) {
          // Past the deadline the watched copy goes on reading; this branch lets go.
          if (late) reader.cancel().catch(() => {});
          break;
        }
        if (length < MAX_RESULT_BODY_CHARS) {
          const text = decoder.decode(value, { stream: true });
          pieces.push(text);
          length += text.length;
        }
      }
    } catch {
      // A body cut short after a 2xx still says what the app answered first.
    } finally {
      clearTimeout(timer);
    }
    return pieces.join("").slice(0, MAX_RESULT_BODY_CHARS);
  }

  // Frozen: a page that got hold of it still could not swap in calls of its own.
  const CALLS = Object.freeze({
    watch({ requests }) {
      watched = (Array.isArray(requests) ? requests : []).map((request) => ({
        method: String(request.method).toUpperCase(),
        pattern: new RegExp(String(request.source)),
      }));
      return true;
    },
    readGlobal({ path }) {
      return readGlobal(path);
    },
    fetch(request) {
      return proxyFetch(request);
    },
  });

  listenOnPort("message", async (event) => {
    const message = messageData(event);
    if (!message || message.kind !== "call" || !hasOwn(CALLS, message.method)) return;
    try {
      const value = await CALLS[message.method](message.args || {});
      post({ kind: "reply", id: message.id, value });
    } catch (error) {
      post({ kind: "reply", id: message.id, error: String(error?.message || error) });
    }
  });
  startPort();

  window.postMessage({ type: HANDSHAKE }, location.origin, [channel.port2]);
})();
