"""Names of the task kinds (SPEC §3)."""

INSTRUCTION_EXECUTE = "instruction.execute"
INSTRUCTION_DELIVER = "instruction.deliver"
RENEWAL_DELIVER = "renewal.deliver"
