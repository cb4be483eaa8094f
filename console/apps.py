from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operator's console: the Django admin over every app, and its overview."""

    name = "console"
    label = "console"
