"""A conversation's mail handle, as the ``mail`` tool and the admin spell it: its grammar and length."""

HANDLE_PATTERN = r"[a-z][a-z0-9-]*"
MAX_HANDLE_CHARS = 64
