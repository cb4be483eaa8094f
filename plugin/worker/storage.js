/**
 * chrome.storage as the `{get, set}` store the pure modules take: `local`
 * for what outlives the browser (settings, outbox, delivery memory,
 * reports), `session` for the connection's state.
 */

function storeOf(area) {
  return {
    async get(key) {
      return (await area.get(key))[key];
    },
    set(key, value) {
      return area.set({ [key]: value });
    },
  };
}

export const local = storeOf(chrome.storage.local);
export const session = storeOf(chrome.storage.session);
