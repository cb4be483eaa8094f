/** JSON-patch-like ops at a JSON pointer, as the v1 stream (`delta_encoding`) sends them, bounded. */

import { isObject, MAX_TEXT_CHARS } from "../../lib/stream-readers.js";

/** Keys a JSON pointer may not walk through: assigning them would reach prototypes. */
const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);


/**
 * Applies one JSON-patch-like op at a JSON pointer inside `root`.
 *
 * @returns {boolean} false when the result grew past the text bound
 */
export function applyPointerOp(root, path, kind, value) {
  const keys = path.slice(1).split("/").map((key) => key.replaceAll("~1", "/").replaceAll("~0", "~"));
  const last = keys.pop();
  let parent = root;
  for (const key of keys) {
    parent = child(parent, key);
    if (parent === undefined) return true;
  }
  if (last === undefined || FORBIDDEN_KEYS.has(last) || typeof parent !== "object" || parent === null) return true;
  const index = Array.isArray(parent) ? arrayIndex(parent, last, kind === "add") : last;
  if (index === undefined) return true;
  const current = Array.isArray(parent) || Object.hasOwn(parent, index) ? parent[index] : undefined;
  switch (kind) {
    case "add":
    case "replace":
      parent[index] = value;
      return typeof value !== "string" || value.length <= MAX_TEXT_CHARS;
    case "append":
      if (typeof current === "string" && typeof value === "string") {
        if (current.length + value.length > MAX_TEXT_CHARS) return false;
        parent[index] = current + value;
      } else if (Array.isArray(current)) {
        current.push(...(Array.isArray(value) ? value : [value]));
      } else if (isObject(current) && isObject(value)) {
        for (const [key, item] of Object.entries(value)) if (!FORBIDDEN_KEYS.has(key)) current[key] = item;
      } else if (current === undefined) {
        parent[index] = value;
      }
      return true;
    case "truncate":
      if (typeof current === "string" && Number.isInteger(value) && value >= 0) parent[index] = current.slice(0, value);
      return true;
    case "remove":
      if (Array.isArray(parent)) parent.splice(index, 1);
      else delete parent[index];
      return true;
    default:
      return true; // an op this parser does not know yet changes nothing it reads
  }
}

function child(value, key) {
  if (FORBIDDEN_KEYS.has(key)) return undefined;
  if (Array.isArray(value)) {
    const index = arrayIndex(value, key, false);
    return index === undefined ? undefined : value[index];
  }
  return isObject(value) && Object.hasOwn(value, key) ? value[key] : undefined;
}

/** An array index from a pointer segment: an existing index, or the end ("-" or length) when adding. */
function arrayIndex(array, key, isAdding) {
  if (isAdding && (key === "-" || key === String(array.length))) return array.length;
  if (!/^(0|[1-9][0-9]*)$/.test(key)) return undefined;
  const index = Number(key);
  return index < array.length ? index : undefined;
}
