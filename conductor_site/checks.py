"""The site's system checks: ``serve`` (and every management command that checks) stops on an unsafe data folder.

The data folder, the embedded channel layer's database and its doorbell
registry hold the secret key, the sessions and the doorbells' secrets. Each
is made private when it is created (``conductor_site.private_files``), but
one that already exists and belongs to another user, or that group or others
may write to (``CONDUCTOR_CHANNEL_LAYER_DB`` in a shared folder, say), is
not this server's to narrow: that user could read the secrets or replace
what the server reads. The server refuses to start on it, and says which
path and why.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core import checks

from conductor_site.private_files import not_private


def private_paths() -> list[tuple[str, Path]]:
    """The paths that must be private to this user, each with what it is."""
    paths = [("the data folder (CONDUCTOR_DATA_DIR)", Path(settings.DATA_DIR))]
    if "channels" in settings.DATABASES:
        from conductor_site.channel_layer import doorbell_folder

        name = str(settings.DATABASES["channels"]["NAME"])
        if (registry := doorbell_folder(name)) is not None:
            paths += [
                ("the channel layer's database (CONDUCTOR_CHANNEL_LAYER_DB)", Path(name)),
                ("the channel layer's doorbell registry", registry),
            ]
    return paths


@checks.register("conductor_site")
def private_data_check(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """An error for each private path owned by another user or writable by group or others."""
    return [
        checks.Error(
            f"{what} {path} {problem}: another user could read the secrets in it or replace what the server reads.",
            hint=f"Give it to the user who runs Conductor, with no write access for group or others "
                 f"(chown that user {path}; chmod go-w {path}), or point the setting at a folder of that user's own.",
            id="conductor_site.E001",
        )
        for what, path in private_paths()
        if (problem := not_private(path)) is not None
    ]
