/**
 * An assistant turn's DOM back as Markdown, for the DOM fallback capture
 * (when the response stream could not be read).
 *
 * Code blocks matter most: the server looks for ```baa fences in the text,
 * so a code block comes back as a fence with its language and its content
 * exactly as the page holds it (highlighting spans flattened, the apps'
 * header bars and copy buttons left out). The rest (paragraphs, headings,
 * lists, quotes, tables, emphasis, links) is rebuilt reasonably, not
 * byte-for-byte as the assistant wrote it.
 *
 * Code blocks as the apps render them (2025-26, class names change):
 * - Claude: `pre > code.language-xxx`, its language label a sibling before `pre`;
 * - ChatGPT: `pre > div > (header bar with the language and a copy button,
 *   div > code.language-xxx)`;
 * - Gemini: `code-block` with a `.code-block-decoration` header whose first
 *   `span` is the language, then `pre > code` without a language class.
 *
 * A site described as data (plugin/sites/<name>.json) may say how its own
 * code blocks are built (`answer.code`, SPEC §9): the block element, where
 * its language is (a class prefix, an attribute, or a header element's
 * text), which elements hold its lines and what to leave out. Those blocks
 * are read by that rule; everything else, and every site that says
 * nothing, by the generic rules above.
 *
 * Only `nodeType`, `nodeName`, `childNodes`, `textContent` and
 * `getAttribute` are used (and `querySelectorAll` for a site's code rule),
 * so tests can pass small fake trees.
 */

const ELEMENT = 1;
const TEXT = 3;
/** Deeper than this, a subtree is taken as plain text: page-made nesting must not exhaust the stack. */
const MAX_DEPTH = 200;
/** A language label is short; longer text before a code block is content. */
const MAX_LABEL_CHARS = 40;
/** How many element siblings ahead a language label may sit from its `pre`. */
const LABEL_REACH = 3;

const SKIPPED = new Set(["BUTTON", "SVG", "STYLE", "SCRIPT", "TEMPLATE", "NOSCRIPT", "IFRAME", "INPUT", "TEXTAREA", "SELECT", "MAT-ICON"]);
const HEADINGS = { H1: 1, H2: 2, H3: 3, H4: 4, H5: 5, H6: 6 };
const BLOCKS = new Set([
  "P", "H1", "H2", "H3", "H4", "H5", "H6", "UL", "OL", "LI", "PRE", "BLOCKQUOTE", "HR", "TABLE",
  "DIV", "SECTION", "ARTICLE", "MAIN", "HEADER", "FOOTER", "ASIDE", "FIGURE", "DETAILS", "SUMMARY", "DL", "DT", "DD",
  "CODE-BLOCK",
]);

/**
 * @typedef {{nodeType: number, nodeName: string, childNodes: ArrayLike<MarkdownNode>,
 *   textContent: string | null, getAttribute?(name: string): string | null}} MarkdownNode
 * @typedef {{text: string, isList: boolean}} Block
 */

/**
 * @typedef {{block: string[], language?: {class_prefix?: string, attribute?: string, header?: string[]},
 *   lines?: string[], skip?: string[]}} CodeRule a description's `answer.code`
 */

/**
 * The site's code blocks found under the answer, for the walk to read by
 * the site's rule; empty without a rule.
 *
 * @type {Map<MarkdownNode, CodeRule>}
 */
let siteBlocks = new Map();

/**
 * @param {MarkdownNode} element
 * @param {{code?: CodeRule | null}} [options] `code`: the site's code block rule, when its description has one
 * @returns {string} the Markdown, without a trailing newline
 */
export function elementToMarkdown(element, { code = null } = {}) {
  siteBlocks = new Map(code ? queryAll(element, code.block).map((block) => [block, code]) : []);
  try {
    const blocks = element.nodeType === ELEMENT ? blockOf(element, 0) : paragraph(inline(element, 0));
    return joinBlocks(blocks).replace(/\s+$/, "");
  } finally {
    siteBlocks = new Map();
  }
}

/** Every element under `root` matching any of `selectors`; a selector the page's engine refuses matches nothing. */
function queryAll(root, selectors = []) {
  const found = [];
  for (const selector of selectors) {
    try {
      found.push(...Array.from(root.querySelectorAll?.(selector) ?? []));
    } catch {
      // An invalid selector (a description is data, not checked by a CSS parser): nothing.
    }
  }
  return found;
}

function name(node) {
  return String(node.nodeName ?? "").toUpperCase();
}

function children(node) {
  return Array.from(node.childNodes ?? []);
}

function attribute(node, attributeName) {
  return (typeof node.getAttribute === "function" && node.getAttribute(attributeName)) || "";
}

function isSkipped(node) {
  if (node.nodeType !== ELEMENT) return false;
  // getAttribute gives "" for a bare `hidden` and null when it is absent.
  return SKIPPED.has(name(node)) || (typeof node.getAttribute === "function" && node.getAttribute("hidden") != null);
}

/** Block-level: a known block element, or a custom element (Gemini's) that holds one. */
function isBlock(node, depth = 0) {
  if (node.nodeType !== ELEMENT) return false;
  if (siteBlocks.has(node)) return true;
  const nodeName = name(node);
  if (BLOCKS.has(nodeName)) return true;
  if (!nodeName.includes("-") || depth > MAX_DEPTH) return false;
  return children(node).some((child) => isBlock(child, depth + 1));
}

/**
 * Blocks joined by blank lines; inside a list item (`isItem`) a nested list
 * follows the item's text on the next line, as assistants write it. (Outside
 * an item that would not do: an ordered list starting past 1 cannot
 * interrupt a paragraph.)
 */
function joinBlocks(blocks, isItem = false) {
  return blocks.map((block, index) => (index === 0 ? "" : isItem && block.isList ? "\n" : "\n\n") + block.text).join("");
}

/**
 * The blocks of a container: runs of inline children become paragraphs.
 *
 * @returns {Block[]}
 */
function blocksOf(node, depth) {
  if (depth > MAX_DEPTH) return paragraph(collapse(node.textContent ?? ""));
  /** @type {Block[]} */
  const blocks = [];
  let run = "";
  const nodes = children(node).filter((child) => !isSkipped(child) && (child.nodeType === ELEMENT || child.nodeType === TEXT));
  nodes.forEach((child, index) => {
    if (!isBlock(child)) {
      run += inline(child, depth + 1);
      return;
    }
    blocks.push(...paragraph(run));
    run = "";
    if (isLanguageLabel(child, followingElements(nodes, index))) return;
    blocks.push(...blockOf(child, depth + 1));
  });
  blocks.push(...paragraph(run));
  return blocks;
}

/** @returns {Block[]} */
function paragraph(text) {
  const lines = text.split("\n").map((line) => line.trim());
  const joined = lines.join("\n").replace(/^\n+|\n+$/g, "");
  return joined ? [{ text: joined, isList: false }] : [];
}

/** @returns {Block[]} */
function blockOf(element, depth) {
  if (siteBlocks.has(element)) return siteCodeBlock(element, siteBlocks.get(element));
  const nodeName = name(element);
  if (Object.hasOwn(HEADINGS, nodeName)) {
    const text = collapse(inlineChildren(element, depth)).trim();
    return text ? [{ text: `${"#".repeat(HEADINGS[nodeName])} ${text}`, isList: false }] : [];
  }
  switch (nodeName) {
    case "P":
      return paragraph(inlineChildren(element, depth));
    case "UL":
    case "OL":
      return list(element, depth);
    case "PRE":
      return [{ text: fence(codeText(codeElement(element) ?? element), languageOf(element)), isList: false }];
    case "CODE-BLOCK":
      return geminiCodeBlock(element);
    case "BLOCKQUOTE": {
      const inner = joinBlocks(blocksOf(element, depth));
      const quoted = inner.split("\n").map((line) => (line ? `> ${line}` : ">")).join("\n");
      return inner ? [{ text: quoted, isList: false }] : [];
    }
    case "HR":
      return [{ text: "---", isList: false }];
    case "TABLE":
      return table(element, depth);
    default:
      return blocksOf(element, depth);
  }
}

function list(element, depth) {
  const isOrdered = name(element) === "OL";
  const start = Number.parseInt(attribute(element, "start"), 10);
  let number = Number.isFinite(start) ? start : 1;
  const items = [];
  for (const item of children(element)) {
    if (item.nodeType !== ELEMENT || name(item) !== "LI") continue;
    const marker = isOrdered ? `${number++}.` : "-";
    const indent = " ".repeat(marker.length + 1);
    const body = joinBlocks(blocksOf(item, depth + 1), true);
    const lines = body.split("\n").map((line, index) => (index === 0 ? `${marker} ${line}` : line ? indent + line : line));
    items.push(lines.join("\n").replace(/\s+$/, ""));
  }
  return items.length ? [{ text: items.join("\n"), isList: true }] : [];
}

function table(element, depth) {
  const rows = [];
  const collect = (node, level) => {
    for (const child of children(node)) {
      if (child.nodeType !== ELEMENT || level > MAX_DEPTH) continue;
      if (name(child) === "TR") rows.push(child);
      else if (name(child) !== "TABLE") collect(child, level + 1);
    }
  };
  collect(element, depth);
  const cells = rows.map((row) =>
    children(row)
      .filter((cell) => cell.nodeType === ELEMENT && (name(cell) === "TH" || name(cell) === "TD"))
      .map((cell) => collapse(inlineChildren(cell, depth + 1)).trim().replaceAll("|", "\\|")),
  );
  if (!cells.length) return [];
  const width = Math.max(...cells.map((row) => row.length));
  const line = (row) => `| ${Array.from({ length: width }, (_, i) => row[i] ?? "").join(" | ")} |`;
  const separator = `| ${Array(width).fill("---").join(" | ")} |`;
  return [{ text: [line(cells[0]), separator, ...cells.slice(1).map(line)].join("\n"), isList: false }];
}

/** Gemini's `code-block`: the language from its header, the code from its `code`. */
function geminiCodeBlock(element) {
  const header = findFirst(element, (node) => /(^|\s)code-block-decoration(\s|$)/.test(attribute(node, "class")));
  const label = header ? collapse(inlineText(findFirst(header, (node) => name(node) === "SPAN") ?? header)).trim() : "";
  const code = codeElement(element) ?? findFirst(element, (node) => name(node) === "PRE");
  const language = /^[A-Za-z0-9_+#.-]{1,30}$/.test(label) ? label.toLowerCase() : "";
  return code ? [{ text: fence(codeText(code), language), isList: false }] : [];
}

/**
 * A code block by its site's rule: the language from the rule's place for
 * it (else from a `language-*` class inside, as the generic rule reads it);
 * the code from the rule's line elements, one line each (Monaco's lines,
 * whose spaces are no-break spaces), or else from the block's `code`
 * element (or the block) without what the rule leaves out.
 *
 * @param {MarkdownNode} element
 * @param {CodeRule} rule
 */
function siteCodeBlock(element, rule) {
  const skipped = new Set(queryAll(element, rule.skip));
  const language = siteLanguage(element, rule.language ?? {}) || languageOf(element);
  const lines = queryAll(element, rule.lines).filter((line) => !skipped.has(line));
  if (lines.length) {
    // Nested matches (a line inside a matched line) would repeat text: the outermost only.
    const outer = new Set(lines);
    const own = lines.filter((line) => !hasAncestorIn(line, outer, element));
    const code = own.map((line) => codeText(line, skipped).replaceAll("\u00a0", " ")).join("\n");
    return [{ text: fence(code, language), isList: false }];
  }
  const holder = findFirst(element, (node) => name(node) === "CODE" && !skipped.has(node)) ?? element;
  return [{ text: fence(codeText(holder, skipped), language), isList: false }];
}

/** Whether an ancestor of `node` below `root` is one of `nodes`. */
function hasAncestorIn(node, nodes, root) {
  for (let current = node.parentNode; current && current !== root; current = current.parentNode) if (nodes.has(current)) return true;
  return false;
}

/** The language where the site's rule says it is, or "". */
function siteLanguage(element, { class_prefix: prefix, attribute: attributeName, header }) {
  let label = "";
  if (attributeName) label = attribute(element, attributeName);
  else if (header) label = collapse(queryAll(element, header)[0]?.textContent ?? "").trim();
  else if (prefix) {
    const withClass = [element, ...elementsOf(element)].find((node) => classes(node).some((name) => name.startsWith(prefix)));
    label = withClass ? classes(withClass).find((name) => name.startsWith(prefix)).slice(prefix.length) : "";
  }
  label = label.trim();
  return /^[A-Za-z0-9_+#.-]{1,30}$/.test(label) ? label.toLowerCase() : "";
}

function classes(node) {
  return attribute(node, "class").split(/\s+/).filter(Boolean);
}

/** The elements under `node`, depth-first, at most MAX_DEPTH deep. */
function elementsOf(node, depth = 0) {
  if (depth > MAX_DEPTH) return [];
  return children(node).filter((child) => child.nodeType === ELEMENT).flatMap((child) => [child, ...elementsOf(child, depth + 1)]);
}

/** The `code` element inside a `pre` (or a code block), past any header bar. */
function codeElement(element) {
  return findFirst(element, (node) => name(node) === "CODE");
}

function languageOf(pre) {
  const code = codeElement(pre);
  return (code && attribute(code, "class").match(/(?:^|\s)(?:language|lang)-([^\s]+)/)?.[1]) || "";
}

/** Up to LABEL_REACH element siblings after `nodes[index]`. */
function followingElements(nodes, index) {
  const found = [];
  for (let next = index + 1; next < nodes.length && found.length < LABEL_REACH; next++) {
    if (nodes[next].nodeType === ELEMENT) found.push(nodes[next]);
  }
  return found;
}

/**
 * Whether `node` is the app's language label for the code block that comes
 * just after it (Claude puts it before `pre`, with the copy button between),
 * which must not become a paragraph of its own.
 */
function isLanguageLabel(node, following) {
  if (name(node) === "PRE" || findFirst(node, (inner) => name(inner) === "PRE", 3)) return false;
  const label = (node.textContent ?? "").trim();
  if (!label || label.length > MAX_LABEL_CHARS) return false;
  for (const next of following) {
    const pre = name(next) === "PRE" ? next : findFirst(next, (inner) => name(inner) === "PRE", 3);
    if (pre) return languageOf(pre).toLowerCase() === label.toLowerCase();
  }
  return false;
}

/** The first element under `node` (depth-first, itself excluded) for which `test` holds. */
function findFirst(node, test, maxDepth = MAX_DEPTH) {
  if (maxDepth <= 0) return null;
  for (const child of children(node)) {
    if (child.nodeType !== ELEMENT) continue;
    if (test(child)) return child;
    const found = findFirst(child, test, maxDepth - 1);
    if (found) return found;
  }
  return null;
}

/**
 * A code element's text as the page holds it: text nodes verbatim, `<br>`
 * as a line end; `skipped` elements (a site's header, its copy button) left out.
 */
function codeText(node, skipped = new Set()) {
  const pieces = [];
  const walk = (current, depth) => {
    for (const child of children(current)) {
      if (child.nodeType === TEXT) pieces.push(child.textContent ?? "");
      else if (child.nodeType !== ELEMENT || isSkipped(child) || skipped.has(child)) continue;
      else if (name(child) === "BR") pieces.push("\n");
      else if (depth > MAX_DEPTH) pieces.push(child.textContent ?? "");
      else walk(child, depth + 1);
    }
  };
  walk(node, 0);
  return pieces.join("").replace(/\n$/, "");
}

/** A fenced code block, its fence longer than any backtick run inside. */
function fence(code, language) {
  const longestRun = Math.max(0, ...(code.match(/`+/g) ?? []).map((run) => run.length));
  const marks = "`".repeat(Math.max(3, longestRun + 1));
  return `${marks}${language}\n${code}\n${marks}`;
}

function collapse(text) {
  return text.replace(/[ \t\n\r\f]+/g, " ");
}

function inlineChildren(node, depth) {
  return children(node).map((child) => inline(child, depth + 1)).join("");
}

function inlineText(node) {
  return inline(node, 0);
}

/** Inline Markdown of one node; `<br>` is kept as "\n" for `paragraph` to split on. */
function inline(node, depth) {
  if (node.nodeType === TEXT) return collapse(node.textContent ?? "");
  if (node.nodeType !== ELEMENT || isSkipped(node)) return "";
  if (depth > MAX_DEPTH) return collapse(node.textContent ?? "");
  switch (name(node)) {
    case "BR":
      return "\n";
    case "STRONG":
    case "B":
      return wrap(inlineChildren(node, depth), "**");
    case "EM":
    case "I":
      return wrap(inlineChildren(node, depth), "*");
    case "DEL":
    case "S":
      return wrap(inlineChildren(node, depth), "~~");
    case "CODE":
      return codeSpan(node.textContent ?? "");
    case "A": {
      const label = inlineChildren(node, depth);
      const href = attribute(node, "href");
      return href && label.trim() ? `[${label.trim()}](${href.replaceAll(" ", "%20").replaceAll(")", "%29")})` : label;
    }
    case "IMG":
      return attribute(node, "alt");
    default:
      return inlineChildren(node, depth);
  }
}

/** `**text**` with the text's outer spaces kept outside the marks, as Markdown needs. */
function wrap(text, marks) {
  const match = text.match(/^(\s*)([\s\S]*?)(\s*)$/);
  return match[2] ? `${match[1]}${marks}${match[2]}${marks}${match[3]}` : text;
}

function codeSpan(text) {
  const longestRun = Math.max(0, ...(text.match(/`+/g) ?? []).map((run) => run.length));
  const ticks = "`".repeat(longestRun + 1);
  const padding = text.startsWith("`") || text.endsWith("`") ? " " : "";
  return `${ticks}${padding}${text}${padding}${ticks}`;
}
