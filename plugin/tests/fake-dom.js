// Small DOM trees with only what lib/markdown.js reads (nodeType, nodeName,
// childNodes, textContent, getAttribute), plus querySelectorAll/closest
// over an exact-selector table for the adapters' DOM helpers.

export function text(data) {
  return { nodeType: 3, nodeName: "#text", childNodes: [], textContent: data, parentNode: null };
}

/**
 * @param {string} name
 * @param {Record<string, string>} [attributes]
 * @param {...(object | string)} childNodes strings become text nodes
 */
export function el(name, attributes = {}, ...childNodes) {
  const node = {
    nodeType: 1,
    nodeName: name.toUpperCase(),
    childNodes: childNodes.map((child) => (typeof child === "string" ? text(child) : child)),
    parentNode: null,
    getAttribute: (attribute) => (Object.hasOwn(attributes, attribute) ? attributes[attribute] : null),
    // Iterative, like the browser's native getter: a deep tree must not overflow the test's stack.
    get textContent() {
      const pieces = [];
      const stack = [...this.childNodes].reverse();
      while (stack.length) {
        const current = stack.pop();
        if (current.nodeType === 3) pieces.push(current.textContent);
        else stack.push(...[...current.childNodes].reverse());
      }
      return pieces.join("");
    },
  };
  for (const child of node.childNodes) child.parentNode = node;
  return node;
}

/**
 * A document whose querySelectorAll answers from `matches` (selector -> nodes)
 * and whose nodes answer `closest(selector)` from the same table.
 */
export function fakeDocument(matches) {
  for (const nodes of Object.values(matches)) {
    for (const node of nodes) {
      node.closest = (selector) => {
        for (let current = node; current; current = current.parentNode) {
          if ((matches[selector] ?? []).includes(current)) return current;
        }
        return null;
      };
      node.querySelector = (selector) => (matches[selector] ?? []).find((match) => isInside(match, node)) ?? null;
      node.querySelectorAll = (selector) => (matches[selector] ?? []).filter((match) => isInside(match, node));
    }
  }
  return { querySelectorAll: (selector) => matches[selector] ?? [] };
}

function isInside(node, ancestor) {
  for (let current = node.parentNode; current; current = current.parentNode) if (current === ancestor) return true;
  return false;
}

/**
 * A document that builds trees the way a renderer does (`createElement`,
 * `createTextNode`, `setAttribute`, `appendChild`, `textContent`), for
 * DOM-free rendering tests. Setting `innerHTML` or `outerHTML`, or calling
 * `insertAdjacentHTML`, throws: a renderer that parses HTML fails its test.
 */
export function buildingDocument() {
  const refuse = () => {
    throw new Error("HTML parsing is not allowed here");
  };
  const createTextNode = (data) => ({ nodeType: 3, nodeName: "#text", childNodes: [], parentNode: null, textContent: String(data), data: String(data) });
  const createElement = (name) => {
    const attributes = new Map();
    const node = {
      nodeType: 1,
      nodeName: name.toUpperCase(),
      childNodes: [],
      parentNode: null,
      attributes,
      getAttribute: (attribute) => attributes.get(attribute) ?? null,
      setAttribute: (attribute, value) => void attributes.set(attribute, String(value)),
      hasAttribute: (attribute) => attributes.has(attribute),
      appendChild(child) {
        child.parentNode = node;
        node.childNodes.push(child);
        return child;
      },
      get textContent() {
        return node.childNodes.map((child) => child.textContent).join("");
      },
      set textContent(data) {
        node.childNodes = [createTextNode(data)];
      },
      get classList() {
        return (attributes.get("class") ?? "").split(/\s+/).filter(Boolean);
      },
      set innerHTML(_html) {
        refuse();
      },
      set outerHTML(_html) {
        refuse();
      },
      insertAdjacentHTML: refuse,
    };
    return node;
  };
  return { createElement, createTextNode };
}

/** Every element under `node` (itself included) that `isWanted`, in document order. */
export function elementsUnder(node, isWanted = () => true) {
  const found = [];
  const stack = [node];
  while (stack.length) {
    const current = stack.pop();
    if (current.nodeType !== 1) continue;
    if (isWanted(current)) found.push(current);
    stack.push(...[...current.childNodes].reverse());
  }
  return found;
}

/** The elements under `node` with class `name`. */
export function byClass(node, name) {
  return elementsUnder(node, (element) => element.classList.includes(name));
}
