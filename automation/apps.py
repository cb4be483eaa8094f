from django.apps import AppConfig


class AutomationConfig(AppConfig):
    name = "automation"

    def ready(self) -> None:
        # Fill the registries.
        from automation.tools import catalog  # noqa: F401
