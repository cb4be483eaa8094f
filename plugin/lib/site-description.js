/**
 * A chat site's description (plugin/sites/<name>.json) checked against the
 * rules of plugin/sites/schema.json, which this module mirrors exactly (the
 * plugin ships no JSON Schema library; tests/site-description.test.js runs
 * a real JSON Schema implementation beside this one on the same fixtures).
 *
 * A description is data only: selectors, path prefixes, an id kind from a
 * fixed list, dates and citations. The rules refuse anything else (an
 * unknown key, markup, `javascript:`, an `on…` event-handler attribute, a
 * URL where a selector belongs, over-long strings, too many items), so a
 * description, even one a server hands over later, can never make the
 * plugin run code, fetch a URL or read outside the selectors it names.
 *
 * Pure: no DOM, no I/O.
 */

const DATE = /^20[2-9][0-9]-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$/;
/** At most 16 characters: the server keeps the platform in a 16-character column. */
const NAME = /^[a-z][a-z0-9_]{1,15}$/;
/** The three adapters with network capture keep their names... */
const RESERVED_NAMES = new Set(["claude", "chatgpt", "gemini"]);
/**
 * ...and their origins: the schema's `$defs/origin` `not` enum (a test
 * checks both against adapters/index.js NETWORK_ORIGINS). That an origin
 * belongs to one site only is a rule over a set of descriptions, which a
 * schema cannot say: lib/sites.js `sitesInForce`.
 */
export const RESERVED_ORIGINS = Object.freeze(["https://claude.ai", "https://chatgpt.com", "https://gemini.google.com"]);
const PLAIN_TEXT = /^[^<>{}\u0000-\u001f]+$/;
const ORIGIN = /^https:\/\/[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/;
const PATH_PREFIX = /^\/([A-Za-z0-9._~-]{1,40}\/){0,6}$/;
const QUERY_PARAMETER = /^[a-z][a-z0-9_]{0,30}$/;
const NOT_ID = /^[A-Za-z0-9._~-]{1,64}$/;
const SELECTOR = /^(?!\s*\/\/)(?!.*(<|[jJ][aA][vV][aA][sS][cC][rR][iI][pP][tT]\s*:|:\/\/|[uU][rR][lL]\s*\(|\[\s*[oO][nN][A-Za-z-]*\s*([~|^$*]?=|\])))[^{};\u0000-\u001f]+$/u;
const REPO = /^[A-Za-z0-9][A-Za-z0-9-]{0,38}\/[A-Za-z0-9._-]{1,100}$/;
const SOURCE_PATH = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/;
const COMMIT = /^[0-9a-f]{7,40}$/;
const CLASS_PREFIX = /^[A-Za-z][A-Za-z0-9_-]{0,30}$/;
const ATTRIBUTE = /^[a-z][a-z0-9_.:-]{0,40}$/;

export const MAX_SELECTOR_CHARS = 300;
export const MAX_SELECTORS = 12;
export const COMPOSER_KINDS = Object.freeze(["textarea", "contenteditable", "prosemirror", "lexical"]);
export const ID_KINDS = Object.freeze(["uuid", "token"]);

/** @typedef {(value: unknown, path: string, problems: string[]) => void} Rule */

const isObject = (value) => typeof value === "object" && value !== null && !Array.isArray(value);

/** @returns {Rule} */
function text({ pattern, min = 1, max = Infinity }) {
  return (value, path, problems) => {
    if (typeof value !== "string") return void problems.push(`${path}: not a string`);
    // JSON Schema counts code points.
    const length = [...value].length;
    if (length < min) problems.push(`${path}: shorter than ${min}`);
    else if (length > max) problems.push(`${path}: longer than ${max}`);
    else if (pattern && !pattern.test(value)) problems.push(`${path}: not allowed here`);
  };
}

/** @returns {Rule} */
function oneOf(values) {
  return (value, path, problems) => {
    if (!values.includes(value)) problems.push(`${path}: not one of ${values.join(", ")}`);
  };
}

/** @returns {Rule} */
function list(item, { min = 0, max, unique = false }) {
  return (value, path, problems) => {
    if (!Array.isArray(value)) return void problems.push(`${path}: not a list`);
    if (value.length < min) problems.push(`${path}: fewer than ${min} items`);
    if (value.length > max) return void problems.push(`${path}: more than ${max} items`);
    if (unique && new Set(value.map((entry) => JSON.stringify(entry))).size !== value.length) problems.push(`${path}: repeated items`);
    value.forEach((entry, index) => item(entry, `${path}[${index}]`, problems));
  };
}

/** @returns {Rule} */
function record(fields, required) {
  return (value, path, problems) => {
    if (!isObject(value)) return void problems.push(`${path}: not an object`);
    for (const key of Object.keys(value)) if (!Object.hasOwn(fields, key)) problems.push(`${path}.${key}: unknown key`);
    for (const key of required) if (!Object.hasOwn(value, key)) problems.push(`${path}.${key}: missing`);
    for (const [key, rule] of Object.entries(fields)) if (Object.hasOwn(value, key)) rule(value[key], `${path}.${key}`, problems);
  };
}

const date = text({ pattern: DATE });
const pathPrefix = text({ pattern: PATH_PREFIX, max: 100 });
const selector = text({ pattern: SELECTOR, max: MAX_SELECTOR_CHARS });
const selectors = list(selector, { min: 1, max: MAX_SELECTORS });
const optionalSelectors = list(selector, { max: MAX_SELECTORS });
const sources = list(
  record({ repo: text({ pattern: REPO }), path: text({ pattern: SOURCE_PATH, max: 200 }), commit: text({ pattern: COMMIT }) }, ["repo", "path", "commit"]),
  { min: 1, max: 4 },
);

/** @returns {Rule} exactly one of `fields` */
function oneKeyOf(fields) {
  const rule = record(fields, []);
  return (value, path, problems) => {
    rule(value, path, problems);
    if (isObject(value) && Object.keys(value).length !== 1) problems.push(`${path}: not exactly one of ${Object.keys(fields).join(", ")}`);
  };
}

/** `answer.code`: how the site renders a code block (lib/markdown.js reads it). */
const codeRule = record(
  {
    block: selectors,
    language: oneKeyOf({ class_prefix: text({ pattern: CLASS_PREFIX }), attribute: text({ pattern: ATTRIBUTE }), header: selectors }),
    lines: optionalSelectors,
    skip: optionalSelectors,
  },
  ["block"],
);

/** @type {Rule} */
function origin(value, path, problems) {
  text({ pattern: ORIGIN, max: 100 })(value, path, problems);
  if (RESERVED_ORIGINS.includes(value)) problems.push(`${path}: the origin of an adapter with network capture`);
}

/** @type {Rule} */
function name(value, path, problems) {
  text({ pattern: NAME })(value, path, problems);
  if (RESERVED_NAMES.has(value)) problems.push(`${path}: the name of an adapter with network capture`);
}

const description = record(
  {
    name,
    title: text({ pattern: PLAIN_TEXT, max: 60 }),
    version: date,
    origins: list(origin, { min: 1, max: 4, unique: true }),
    pages: list(pathPrefix, { min: 1, max: 8, unique: true }),
    capture: oneOf(["dom"]),
    delivery: list(oneOf(["dom"]), { min: 1, max: 1 }),
    conversation: record(
      {
        path_prefixes: list(pathPrefix, { min: 1, max: 8, unique: true }),
        id: oneOf(ID_KINDS),
        query: text({ pattern: QUERY_PARAMETER }),
        not_ids: list(text({ pattern: NOT_ID }), { max: 8, unique: true }),
        checked: date,
        sources,
      },
      ["path_prefixes", "id", "checked", "sources"],
    ),
    answer: record(
      { turn: selectors, text: optionalSelectors, streaming: selectors, finished: optionalSelectors, code: codeRule, checked: date, sources },
      ["turn", "streaming", "checked", "sources"],
    ),
    composer: record(
      { kind: oneOf(COMPOSER_KINDS), input: selectors, send: optionalSelectors, signed_out: optionalSelectors, checked: date, sources },
      ["kind", "input", "send", "checked", "sources"],
    ),
    delivered: record({ user_turn: selectors, user_turn_text: optionalSelectors, checked: date, sources }, ["user_turn", "checked", "sources"]),
    uncertain: list(text({ pattern: PLAIN_TEXT, max: 300 }), { max: 12 }),
  },
  ["name", "title", "version", "origins", "capture", "delivery", "conversation", "answer", "composer", "delivered"],
);

/**
 * The problems of `value` as a site description, each "path: what is
 * wrong"; an empty list when it is one.
 *
 * @param {unknown} value
 * @returns {string[]}
 */
export function siteDescriptionProblems(value) {
  const problems = [];
  description(value, "$", problems);
  return problems;
}

/** Raised for a description that breaks the schema's rules; `problems` says where. */
export class InvalidSiteDescription extends Error {
  /** @param {string[]} problems */
  constructor(problems) {
    super(`not a valid site description: ${problems.slice(0, 5).join("; ")}${problems.length > 5 ? ` (and ${problems.length - 5} more)` : ""}`);
    this.name = "InvalidSiteDescription";
    this.problems = problems;
  }
}

/**
 * `value`, deep-frozen, when it is a valid site description; else throws
 * `InvalidSiteDescription`.
 *
 * @param {unknown} value
 * @returns {Readonly<Record<string, any>>}
 */
export function validSiteDescription(value) {
  const problems = siteDescriptionProblems(value);
  if (problems.length) throw new InvalidSiteDescription(problems);
  return deepFreeze(structuredClone(value));
}

function deepFreeze(value) {
  if (typeof value === "object" && value !== null) {
    for (const entry of Object.values(value)) deepFreeze(entry);
    Object.freeze(value);
  }
  return value;
}
