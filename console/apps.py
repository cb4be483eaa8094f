from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ConsoleConfig(AppConfig):
    """The operator's console: the Django admin over every app, and its overview."""

    default = True  # the module also holds the admin's config, below
    name = "console"
    label = "console"


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """``django.contrib.admin`` with the console's site (``console.site.ConsoleAdminSite``) as the default."""

    default = False
    default_site = "console.site.ConsoleAdminSite"
