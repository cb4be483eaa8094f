from django.apps import AppConfig


class ConductorSiteConfig(AppConfig):
    """Site-wide pieces: running the services, migrating every database, health."""

    name = "conductor_site"
