"""The permissions of the automation app that code outside its models checks by name."""

# The permission an operator needs to approve a task whose tool runs code (``ApprovalRequirement``).
APPROVE_CODE_CODENAME = "approve_code"
APPROVE_CODE_PERMISSION = f"automation.{APPROVE_CODE_CODENAME}"
