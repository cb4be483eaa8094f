"""A conversation's story: what it asked for, what ran, what came back, and what it waits on now.

``conversation_story`` reads one page of it, in time order, from its
sources, each row one entry:

- its messages (an assistant message carries its ```baa blocks, marked where
  they sit in the text, and each block's outcome: its latest task's result or
  error, or why it is held);
- its other tasks (a message's delivery, renewals, mail in) and the mail its
  blocks sent (``mail.deliver`` tasks of other conversations), each with the
  requests that carried it and the text sent; a text Conductor delivered is
  shown with the task that delivered it, not again as a message;
- what operators did to its tasks (approve, reject, cancel, retry: the
  tasks' events, with the operator as actor);
- what operators did to the conversation (pause, resume, renewal, handle: the
  admin log), and what the person did from the plugin's side panel (pause,
  resume: ``ClientAction``);
- the tool guides given to insert into it, and its moves from one plugin
  client to another of its owner (a re-target).

A page is read by keyset over all the sources at once (``reader``).
Everything shown was written by a chat page, a plugin or a tool: the template
escapes it, and texts are cut to ``TEXT_CHARS`` and made encodable
(``entries``: what each entry shows). What the conversation waits on now is
``waits``.
"""

from console.story.reader import Bound, Cursor, Entry, Story, conversation_story, story_bound
from console.story.waits import Wait, conversation_waits

__all__ = ["Bound", "Cursor", "Entry", "Story", "Wait", "conversation_story", "conversation_waits", "story_bound"]
