/*
 * Conductor's isolated-world entry (a classic script, run at document_start).
 *
 * Content scripts declared in the manifest cannot be ES modules, so this one
 * takes the hook's port (content/page-hook.js hands it over once, before the
 * page's scripts run) and loads content/main.js as a module.
 */
(() => {
  "use strict";
  const HANDSHAKE = "conductor:hook-port";
  const portReady = new Promise((resolve) => {
    const onMessage = (event) => {
      if (event.source !== window || event.data?.type !== HANDSHAKE || !event.ports?.[0]) return;
      window.removeEventListener("message", onMessage, true);
      // The page's own listeners must not get to see or take the port.
      event.stopImmediatePropagation();
      resolve(event.ports[0]);
    };
    window.addEventListener("message", onMessage, true);
  });
  import(chrome.runtime.getURL("content/main.js"))
    .then((main) => main.start(portReady))
    .catch((error) => console.warn("Conductor: the content script did not start:", error));
})();
