/*
 * Conductor's isolated-world entry on a chat site read from the page only (a
 * classic script, registered with chrome.scripting for the sites the person
 * switched on; worker/site-sync.js). Loads content/main.js as a module. No
 * MAIN-world hook runs on these pages, so no port is waited for.
 */
(() => {
  "use strict";
  import(chrome.runtime.getURL("content/main.js"))
    .then((main) => main.startOnSite())
    .catch((error) => console.warn("Conductor: the content script did not start:", error));
})();
