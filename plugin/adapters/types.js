/**
 * The shapes the adapters share (JSDoc only; see plugin/README.md).
 *
 * @typedef {{conversation_id: string, message_id: string, parent_message_id: string,
 *   organization_id: string, text: string}} Capture
 *   `""` for an id the stream and the page did not give; `text` the final message as Markdown.
 *
 * @typedef {{feed(text: string): void, finish(): Capture | null, isRecognised(): boolean,
 *   handoff(): string | null, continues(): string | null, incomplete(): string,
 *   held(): {message_id: string, text: string} | null,
 *   unknowns(): Record<string, string | number>[]}} StreamParser
 *   `feed` takes each decoded chunk, split anywhere; `finish` is called once
 *   when the body ended normally, and gives a capture exactly when the
 *   stream holds a finished answer. `isRecognised` says whether the stream had
 *   this adapter's shape (any event it knows, an error included): only the
 *   diagnosis of a stream without a capture depends on it (cut short or
 *   failed, or changed shape); either way the answer is left to the page.
 *   `handoff` (after `finish`): the conversation id when the stream handed
 *   its answer on to another request that continues it (ChatGPT's
 *   `stream_handoff`; "" when the id is not known), else null.
 *   `continues`: the conversation id when this request continues an answer
 *   handed off before (ChatGPT's `/resume`), else null.
 *   `incomplete` (after `finish`): why the stream said its answer is not
 *   final (`max_tokens`, `refused`, `moderation_blocked`, `error_1037`,
 *   `stop_reason_unknown`, …), else "": one of lib/finality.js's REASONS,
 *   whose verdict says whether the page is read for it.
 *   `held` (after `finish`): that partial answer's id and text when the app
 *   continues the same message in a later request (ChatGPT), else null.
 *   `unknowns` (after `finish`): what the stream held that the adapter does
 *   not know and read past (an unknown Gemini error code after a finished
 *   answer, an unknown Claude stop reason), each a report detail of names
 *   and numbers, for `stream_unrecognised`.
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
 *   deliveryRequests: import('../lib/delivery-rules.js').DeliveryRule[],
 *   createStreamParser(request: {requestUrl: string, requestBody?: string | null, pageUrl?: string}): StreamParser,
 *   dom: {
 *     isGenerating(document: Document): boolean,
 *     lastAssistantMessage(document: Document): Element | null,
 *     messageId(element: Element): string | null,
 *     selectors: import('../lib/composer.js').ComposerSelectors & Record<string, string[]>,
 *   },
 *   readPageValues(names: string[], page: Page): Promise<Record<string, string>>,
 *   readableText?(text: string): string,
 * }} Adapter
 *   `readableText`, when the adapter has it, turns the app's private
 *   markers left in an answer's text (ChatGPT's citations, Gemini's
 *   googleusercontent placeholders) into what a person reads; it is applied
 *   to both captures, so the network and the page give the same text.
 */

export {};
