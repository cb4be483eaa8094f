"""What the benchmarks share: Django set-up, a no-op task kind, and the
environment that points a child server or cluster at this process's databases."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conductor_site.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

NOOP_KIND = "bench.noop"


def setup_django(*, with_noop_kind: bool = False) -> None:
    """Set Django up; optionally register ``NOOP_KIND``, whose executor does nothing."""
    import django

    django.setup()
    if with_noop_kind:
        from automation.kinds import KindSpec, always, kinds
        from automation.outcomes import Success

        kinds.register(KindSpec(name=NOOP_KIND, is_outbound=False, lane=None, is_idempotent=always,
                                executor=lambda ctx: Success(None)))


def child_env(data_dir: str, **extra: str) -> dict[str, str]:
    """Environment for a child server or cluster with its own data folder but our
    databases, channel layer and SECRET_KEY (django-q2 signs queued tasks with it)."""
    from django.conf import settings

    env = {**os.environ, "CONDUCTOR_DATA_DIR": data_dir, "SECRET_KEY": settings.SECRET_KEY, **extra}
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        env["DATABASE_URL"] = f"sqlite:///{settings.DATABASES['default']['NAME']}"
    if "channels" in settings.DATABASES:
        env["CONDUCTOR_CHANNEL_LAYER_DB"] = str(settings.DATABASES["channels"]["NAME"])
    return env
