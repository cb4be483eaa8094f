// Feeding a stream parser the way the content script does: bytes through
// one streaming TextDecoder, so chunks split anywhere, even inside a
// UTF-8 character.

/** Feeds `bytes` in chunks of `size` bytes (splitting UTF-8 characters too) and finishes. */
export function parse(adapter, request, bytes, size) {
  return parseFully(adapter, request, bytes, size).capture;
}

/** The same, with why the stream said it stopped early ("" when it did not). */
export function parseFully(adapter, request, bytes, size) {
  const parser = adapter.createStreamParser(request);
  const decoder = new TextDecoder();
  const step = Number.isFinite(size) ? size : bytes.length;
  for (let start = 0; start < bytes.length; start += step) {
    parser.feed(decoder.decode(bytes.subarray(start, start + step), { stream: true }));
  }
  parser.feed(decoder.decode());
  const capture = parser.finish();
  return { capture, incomplete: parser.incomplete() };
}
