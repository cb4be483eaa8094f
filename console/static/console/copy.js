// A "Copy" button: <button data-copy="ID"> copies the text of the element with that id.
// Falls back to selecting the text when the clipboard is not available (plain http).
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  const text = source.value ?? source.textContent;
  const status = document.getElementById(`${button.dataset.copy}-status`);
  try {
    await navigator.clipboard.writeText(text);
    if (status) status.textContent = "Copied.";
  } catch {
    if (source.select) source.select();
    if (status) status.textContent = "Selected: press Ctrl+C (or ⌘C) to copy.";
  }
});
