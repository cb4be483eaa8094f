/**
 * Adapter reports (SPEC §6 `browser.adapter_report`): what an adapter
 * noticed that suggests a chat site changed, counted per platform and kind
 * and sent at most once a minute each, without any chat content.
 *
 * - `StreamSignature` describes a watched response by its shape only: SSE
 *   event names, the top-level keys of its JSON objects, "array", "text".
 * - `reportDetail` keeps the entries of a detail a report may carry, each
 *   checked against what such a value looks like (a path, a media type,
 *   names); anything else is dropped, so text cannot slip through.
 * - `ReportBatcher` counts and decides what is due; its state is plain JSON,
 *   kept in chrome.storage by the worker so a restart loses no count.
 *
 * Pure: the clock is passed in.
 */

export const REPORT_KINDS = [
  "stream_unrecognised",
  "stream_incomplete",
  "dom_fallback_used",
  "selector_missing",
  "page_value_missing",
  "delivery_blocked",
];
/** At most one report per platform and kind in this long. */
export const REPORT_INTERVAL_MS = 60_000;
/** SPEC §6: at most 16 entries of at most 200 characters. */
export const MAX_DETAIL_ENTRIES = 16;
export const MAX_DETAIL_CHARS = 200;

/** A name from a stream's shape or the adapter's own tables: short, no spaces. */
const NAME = /^[A-Za-z_$][A-Za-z0-9_$.-]{0,31}$/;
/** How much of a response the signature looks at. */
const SIGNATURE_BYTES = 64 * 1024;
const SIGNATURE_ENTRIES = 12;

/** The shape of a response, never its content. */
export class StreamSignature {
  constructor() {
    this.rest = "";
    this.seen = 0;
    /** @type {string[]} */
    this.entries = [];
  }

  feed(text) {
    if (this.seen >= SIGNATURE_BYTES) return;
    const taken = text.slice(0, SIGNATURE_BYTES - this.seen);
    this.seen += taken.length;
    const lines = (this.rest + taken).split(/\r?\n/);
    this.rest = lines.pop() ?? "";
    if (this.rest.length > SIGNATURE_BYTES) this.rest = "";
    for (const line of lines) this.line(line);
  }

  line(raw) {
    const line = raw.trim();
    if (!line) return;
    const event = /^event:\s*(.*)$/.exec(line);
    if (event) return this.add(`event:${NAME.test(event[1]) ? event[1] : "?"}`);
    const data = /^data:\s?(.*)$/.exec(line);
    const body = data ? data[1].trim() : line;
    if (body === "[DONE]") return this.add("done");
    if (/^\d+$/.test(body)) return this.add("length");
    if (body === ")]}'") return this.add("xssi");
    if (body.startsWith("{") || body.startsWith("[")) {
      try {
        const value = JSON.parse(body);
        if (Array.isArray(value)) return this.add("array");
        if (value && typeof value === "object") {
          const keys = Object.keys(value).map((key) => (NAME.test(key) ? key : "?")).sort();
          return this.add(`keys:${[...new Set(keys)].slice(0, 12).join(",")}`);
        }
      } catch {
        return this.add(data ? "data:partial" : "partial");
      }
    }
    return this.add(data ? "data:text" : "text");
  }

  add(entry) {
    if (this.entries.includes(entry) || this.entries.length >= SIGNATURE_ENTRIES) return;
    this.entries.push(entry);
  }

  /** The entries, as many as fit in a detail value. */
  signature() {
    const kept = [];
    for (const entry of this.entries) {
      if ([...kept, entry].join(",").length > MAX_DETAIL_CHARS) break;
      kept.push(entry);
    }
    return kept;
  }
}

/** A request path as a report shows it: no query, ids and unusual segments as `*`. */
export function reportPath(url) {
  let path;
  try {
    path = new URL(url, "https://invalid.example").pathname;
  } catch {
    return "";
  }
  const segments = path.split("/").map((segment) => (/^[A-Za-z][A-Za-z_.-]{0,39}$/.test(segment) || segment === "" ? segment : "*"));
  return segments.join("/").slice(0, MAX_DETAIL_CHARS);
}

/** What each detail entry may hold. A value that does not fit is dropped. */
const DETAIL_VALUES = {
  path: (value) => typeof value === "string" && /^(\/[A-Za-z_.*-]*)*$/.test(value),
  content_type: (value) => typeof value === "string" && /^[a-z]{1,20}\/[a-z][a-z.+-]{0,39}$/.test(value),
  signature: (value) => Array.isArray(value) && value.every((entry) => typeof entry === "string" && /^[A-Za-z_$:.,?-][A-Za-z0-9_$:.,?-]*$/.test(entry)),
  reason: (value) => typeof value === "string" && NAME.test(value),
  selectors: (value) => typeof value === "string" && NAME.test(value),
  names: (value) => Array.isArray(value) && value.every((entry) => typeof entry === "string" && NAME.test(entry)),
  method: (value) => typeof value === "string" && NAME.test(value),
  status: (value) => Number.isInteger(value) && value >= 0 && value < 1000,
  // An in-stream error code the adapter does not know (Gemini's).
  code: (value) => Number.isInteger(value) && value >= 0 && value < 1_000_000,
};

/** The entries of `detail` a report may carry (SPEC §6 bounds), the rest dropped. */
export function reportDetail(detail) {
  /** @type {Record<string, any>} */
  const kept = {};
  for (const [key, value] of Object.entries(detail ?? {})) {
    if (Object.keys(kept).length >= MAX_DETAIL_ENTRIES) break;
    if (!Object.hasOwn(DETAIL_VALUES, key) || !DETAIL_VALUES[key](value)) continue;
    const shown = Array.isArray(value) ? value.join(",") : String(value);
    if (shown.length > MAX_DETAIL_CHARS) continue;
    kept[key] = Array.isArray(value) ? [...value] : value;
  }
  return kept;
}

/**
 * Counts reports per platform and kind; `due(now)` gives those to send: a
 * count not sent yet, and the last one of that platform and kind sent at
 * least REPORT_INTERVAL_MS ago. State is JSON (`toJSON`, `fromJSON`).
 */
export class ReportBatcher {
  constructor(state = {}) {
    /** @type {Record<string, {platform: string, adapter: string, kind: string, count: number, first_at: number, last_at: number, detail: any, sent_at: number | null}>} */
    this.entries = state && typeof state === "object" ? { ...state } : {};
  }

  static fromJSON(state) {
    return new ReportBatcher(state);
  }

  toJSON() {
    return this.entries;
  }

  add({ platform, adapter = "", kind, detail = {} }, now) {
    if (!REPORT_KINDS.includes(kind) || typeof platform !== "string" || !NAME.test(platform)) return;
    const key = `${platform}:${kind}`;
    const entry = this.entries[key] ?? { platform, adapter: "", kind, count: 0, first_at: now, last_at: now, detail: {}, sent_at: null };
    if (entry.count === 0) entry.first_at = now;
    entry.count += 1;
    entry.last_at = now;
    entry.adapter = typeof adapter === "string" ? adapter.slice(0, 64) : "";
    entry.detail = reportDetail(detail);
    this.entries[key] = entry;
  }

  /** The report frames due at `now`, each with an `id`; `sent` marks them. */
  due(now) {
    return Object.entries(this.entries)
      .filter(([, entry]) => entry.count > 0 && (entry.sent_at === null || now - entry.sent_at >= REPORT_INTERVAL_MS))
      .map(([key, entry]) => ({
        key,
        frame: {
          type: "browser.adapter_report",
          id: `report-${key}-${now}`,
          platform: entry.platform,
          adapter: entry.adapter,
          kind: entry.kind,
          detail: entry.detail,
          count: entry.count,
          first_at: new Date(entry.first_at).toISOString(),
          last_at: new Date(entry.last_at).toISOString(),
        },
      }));
  }

  /** The report of `key` went out at `now`: its count starts again. */
  sent(key, now) {
    const entry = this.entries[key];
    if (!entry) return;
    entry.count = 0;
    entry.sent_at = now;
  }
}
