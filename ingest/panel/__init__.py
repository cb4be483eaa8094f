"""The plugin's side panel (SPEC §6 message status): what became of each block of a message, told to the chat's panel.

``status`` (the status's shapes, pure), ``selectors`` (its reads, and the
badge's count), ``services`` (a conversation's status and pause, asked from
the panel), ``push`` (``instruction.status`` after each committed change),
``pacing`` (a socket's at most one frame per message per 200 ms) and ``frames`` (``status.get``, pause, resume: registered at ``IngestConfig.ready``).
"""
