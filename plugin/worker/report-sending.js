/**
 * Adapter reports (SPEC §6 browser.adapter_report): counts kept in
 * chrome.storage.local ("reports", lib/reports.js), so a worker restart
 * loses none; one change at a time, so no count is lost to two
 * read-modify-writes at once. Each platform and kind is sent at most once a
 * minute; what is due waits for the socket.
 */

import { ADAPTERS } from "../adapters/index.js";
import { deliveryFailureReport } from "../lib/deliveries.js";
import { ReportBatcher } from "../lib/reports.js";
import { send } from "./socket.js";
import { local } from "./storage.js";

let reportsTurn = Promise.resolve();

function withReports(change) {
  const next = reportsTurn.then(async () => {
    const batcher = ReportBatcher.fromJSON(await local.get("reports"));
    await change(batcher);
    await local.set("reports", batcher.toJSON());
  });
  reportsTurn = next.catch((error) => console.warn("Conductor: adapter reports were not kept:", error));
  return reportsTurn;
}

function sendDue(batcher) {
  const now = Date.now();
  for (const { key, frame } of batcher.due(now)) {
    if (!send(frame)) return;
    batcher.sent(key, now);
  }
}

/** Counts one report, and sends what is due. */
export function countReport(report) {
  return withReports(async (batcher) => {
    batcher.add(report, Date.now());
    sendDue(batcher);
  });
}

/** Sends the reports due now (after hello.ok, and on the reports alarm); unsent ones wait. */
export function sendDueReports() {
  return withReports(sendDue);
}

/** Counts a failed delivery's report (lib/deliveries.js's `deliveryFailureReport`), if it says something about the site. */
export function reportDeliveryFailure(frame, result, method) {
  const report = deliveryFailureReport(frame, result, method, ADAPTERS);
  if (report) countReport(report);
}
