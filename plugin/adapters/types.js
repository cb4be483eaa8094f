/**
 * The shapes the adapters share (JSDoc only; see plugin/README.md).
 *
 * @typedef {{conversation_id: string, message_id: string, parent_message_id: string,
 *   organization_id: string, text: string}} Capture
 *   `""` for an id the stream and the page did not give; `text` the final message as Markdown.
 *
 * @typedef {{feed(text: string): void, finish(): Capture | null, isRecognised(): boolean}} StreamParser
 *   `feed` takes each decoded chunk, split anywhere; `finish` is called once
 *   when the body ended normally. `isRecognised` says whether the stream had
 *   this adapter's shape (any event it knows, an error included): a
 *   recognised stream that gave no capture was cut or failed, an
 *   unrecognised one changed shape, and only then may the page be read.
 *
 * @typedef {{url: string,
 *   cookie(name: string): Promise<string | undefined> | string | undefined,
 *   readGlobal(path: string): Promise<any>,
 *   fetchJson(url: string, init?: {headers?: Record<string, string>}): Promise<any>}} Page
 *   What a content script reaches of its page. `readGlobal` walks a dotted
 *   path from the MAIN world's `window` ("WIZ_global_data.SNlM0e",
 *   "navigator.language"); `fetchJson` is a same-origin GET with the page's
 *   cookies and the extra headers given.
 *
 * @typedef {{
 *   name: string,
 *   version: string,
 *   origins: string[],
 *   conversationIdFromUrl(url: string): string | null,
 *   conversationUrl(target: {conversation_id: string, page_url?: string}): string,
 *   completionRequest: {method: string, pattern: RegExp},
 *   createStreamParser(request: {requestUrl: string, requestBody?: string | null, pageUrl?: string}): StreamParser,
 *   dom: {
 *     isGenerating(document: Document): boolean,
 *     lastAssistantMessage(document: Document): Element | null,
 *     messageId(element: Element): string | null,
 *     selectors: import('../lib/composer.js').ComposerSelectors & Record<string, string[]>,
 *   },
 *   readPageValues(names: string[], page: Page): Promise<Record<string, string>>,
 * }} Adapter
 */

export {};
