from django.apps import AppConfig


class ConductorSiteConfig(AppConfig):
    """Site-wide pieces: running the services, migrating every database, health."""

    name = "conductor_site"

    def ready(self) -> None:
        from conductor_site import checks  # noqa: F401  (registers the system checks)
