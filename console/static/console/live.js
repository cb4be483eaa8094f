/*
 * Live refresh for the admin's pages, without a reload and without a build step.
 *
 * A page marks each part that changes with `data-live` and an `id`. Every few
 * seconds (the first region's `data-live-interval`, in seconds; 5 by default)
 * this script fetches the page's own URL again, with its query string (so
 * filters, search and page hold), and puts each marked part of the new page
 * into the element with the same id. The element itself stays, so what is
 * bound to it stays bound; only what is inside it changes, and only when it
 * changed.
 *
 * It never works against the operator: it waits while the tab is hidden,
 * while a row is checked, an action is chosen or a field has focus (rows that
 * move under the pointer would be clicked by mistake, and what is checked is
 * what will be submitted). It stops for good, and says so, when the server
 * answers anything but 200 or redirects (a session that ended leads to the
 * login page). The operator can switch it off; the choice is kept in
 * localStorage for every page.
 *
 * The request carries `X-Conductor-Live: 1`, so the server can tell it from a
 * page view.
 */
"use strict";
{
    const HEADER = "X-Conductor-Live";
    const STORAGE_KEY = "conductor-live";
    const DEFAULT_SECONDS = 5;
    const MIN_SECONDS = 1;
    const TYPING = "select, textarea, input:not([type=checkbox]):not([type=radio]):not([type=submit])"
        + ":not([type=button]):not([type=hidden])";

    const regions = () => Array.from(document.querySelectorAll("[data-live][id]"));

    // --- the Django admin's changelist ------------------------------------------------
    //
    // admin/js/actions.js binds the "select all" box and the row counter to the
    // list of row checkboxes it finds once, at load. Rows that a refresh brings
    // would be unknown to it, so it gets a list that is read afresh on every
    // use. This runs before DOMContentLoaded (the script is deferred, after
    // actions.js), when actions.js calls window.Actions.
    const rowCheckboxes = () => document.querySelectorAll("tr input.action-select");
    const liveRowCheckboxes = {
        get length() {
            return rowCheckboxes().length;
        },
        forEach(fn) {
            rowCheckboxes().forEach(fn);
        },
        [Symbol.iterator]() {
            return rowCheckboxes()[Symbol.iterator]();
        },
    };
    if (typeof window.Actions === "function") {
        const djangoActions = window.Actions;
        window.Actions = (checkboxes, options) => djangoActions(liveRowCheckboxes, options);
    }

    // The action bar's counts live outside the rows: copy their text from the new page.
    const MIRRORED = ["div.actions span.action-counter", "div.actions span.question a", "div.actions span.all"];

    function mirror(fresh) {
        for (const selector of MIRRORED) {
            const olds = document.querySelectorAll(selector);
            const news = fresh.querySelectorAll(selector);
            olds.forEach((old, i) => {
                if (!news[i]) return;
                old.textContent = news[i].textContent;
                if (news[i].dataset.actionsIcnt !== undefined) old.dataset.actionsIcnt = news[i].dataset.actionsIcnt;
            });
        }
    }

    // --- swapping ------------------------------------------------------------------------

    function swap(region, fresh) {
        const table = region.querySelector("table#result_list");
        const freshTable = fresh.querySelector("table#result_list");
        if (table && freshTable && table.tBodies[0] && freshTable.tBodies[0]) {
            // The same list: keep its table and header (and the listeners on them), change the rows.
            table.tBodies[0].replaceChildren(...freshTable.tBodies[0].childNodes);
            return;
        }
        region.replaceChildren(...fresh.childNodes);
        // A list that was empty has rows now: they need the admin's actions bound to them.
        if (!table && region.querySelector("input.action-select") && typeof window.Actions === "function") {
            window.Actions(liveRowCheckboxes);
        }
    }

    // Why the refresh should wait now, or null.
    function operatorIsBusy() {
        if (document.querySelector("[data-live] input[type=checkbox]:checked, input.select-across[value='1']")) {
            return "rows are selected";
        }
        if (Array.from(document.querySelectorAll("select[name=action]")).some((select) => select.value)) {
            return "an action is chosen";
        }
        // Typing or choosing in a form; a clicked checkbox or button keeps the focus but is done.
        const active = document.activeElement;
        if (active && active.matches(TYPING) && active.closest("form, [data-live]")) {
            return "a field has focus";
        }
        return null;
    }

    // --- the switch and what it says ------------------------------------------------------

    function readEnabled() {
        try {
            return window.localStorage.getItem(STORAGE_KEY) !== "off";
        } catch (e) {
            return true; // storage refused (a private window's settings): on, as by default
        }
    }

    function writeEnabled(enabled) {
        try {
            window.localStorage.setItem(STORAGE_KEY, enabled ? "on" : "off");
        } catch (e) {
            // Not remembered; the switch still works on this page.
        }
    }

    function buildControl(first, seconds) {
        const control = document.querySelector("[data-live-control]") || document.createElement("p");
        if (!control.isConnected) first.before(control);
        control.classList.add("live-control");
        const label = document.createElement("label");
        const toggle = document.createElement("input");
        toggle.type = "checkbox";
        toggle.id = "live-toggle";
        label.append(toggle, ` Live: refresh every ${seconds} s`);
        const status = document.createElement("span");
        status.id = "live-status";
        status.className = "help";
        status.setAttribute("aria-live", "polite");
        control.replaceChildren(label, " ", status);
        return { toggle, status };
    }

    // --- the loop --------------------------------------------------------------------------

    function start() {
        const first = regions()[0];
        if (!first) return;
        const asked = Number(first.dataset.liveInterval);
        const seconds = Number.isFinite(asked) && asked >= MIN_SECONDS ? asked : DEFAULT_SECONDS;
        const { toggle, status } = buildControl(first, seconds);
        let enabled = readEnabled();
        let stopped = false;
        let inFlight = false;
        let timer = null;
        toggle.checked = enabled;

        const say = (text, isAlert = false) => {
            status.textContent = text;
            status.style.color = isAlert ? "var(--error-fg, #ba2121)" : "";
            document.documentElement.dataset.liveState = stopped ? "stopped" : enabled ? "on" : "off";
        };

        const schedule = () => {
            clearTimeout(timer);
            timer = null;
            if (enabled && !stopped && document.visibilityState === "visible") {
                timer = setTimeout(refresh, seconds * 1000);
            }
        };

        const stop = (why) => {
            stopped = true;
            clearTimeout(timer);
            say(`stopped: ${why}; reload the page to start again`, true);
        };

        async function refresh() {
            if (!enabled || stopped || inFlight || document.visibilityState !== "visible") return;
            const busy = operatorIsBusy();
            if (busy) {
                say(`waiting: ${busy}`);
                schedule();
                return;
            }
            inFlight = true;
            try {
                const response = await fetch(window.location.href, {
                    credentials: "same-origin", headers: { [HEADER]: "1" }, cache: "no-store",
                });
                if (response.redirected) {
                    const toLogin = new URL(response.url).pathname.includes("/login/");
                    stop(toLogin ? "your session has ended" : "the page moved");
                    return;
                }
                if (response.status !== 200) {
                    stop(`the server answered HTTP ${response.status}`);
                    return;
                }
                // Parsed inert, as a <template>'s content: a DOMParser document would take this
                // page's Content-Security-Policy and report the fetched page's <style> (whose nonce
                // is that response's, not this page's) as a violation. Nothing in it loads or runs.
                const template = document.createElement("template");
                template.innerHTML = await response.text();
                const fresh = template.content;
                // The operator may have started something while the page was on its way.
                if (!enabled || operatorIsBusy()) return;
                for (const region of regions()) {
                    const next = fresh.getElementById(region.id);
                    if (next && next.innerHTML !== region.innerHTML) swap(region, next);
                }
                mirror(fresh);
                say(`updated ${new Date().toLocaleTimeString()}`);
            } catch (error) {
                say("the server did not answer; trying again", true);
            } finally {
                inFlight = false;
                schedule();
            }
        }

        toggle.addEventListener("change", () => {
            enabled = toggle.checked;
            writeEnabled(enabled);
            if (enabled) {
                refresh();
            } else {
                clearTimeout(timer);
                say("off");
            }
        });

        document.addEventListener("visibilitychange", () => {
            if (document.visibilityState === "visible") {
                refresh();
            } else {
                clearTimeout(timer);
            }
        });

        say(enabled ? "" : "off");
        schedule();
    }

    if (document.readyState === "loading") {
        document.addEventListener("DOMContentLoaded", start);
    } else {
        start();
    }
}
