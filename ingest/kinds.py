"""The names of the task kinds ingest queues (SPEC §3).

Ingest creates their tasks (one ``instruction.execute`` per accepted block,
one ``instruction.deliver`` per message) and its side panel reads them back,
so it must name them without importing a pipeline, which sits above it.
Their ``KindSpec``s are registered where the work is done
(``pipelines.instructions``, ``pipelines.deliveries``); the engine's registry
is ``automation.kinds``.
"""

INSTRUCTION_EXECUTE = "instruction.execute"
INSTRUCTION_DELIVER = "instruction.deliver"
