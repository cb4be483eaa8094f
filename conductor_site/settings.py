"""Django settings for Conductor.

Everything comes from the environment (django-environ), optionally through a
``.env`` file at the project root. The defaults are safe for local use: debug
off, loopback hosts only, and a secret key generated once into the data folder.
"""

import datetime as dt
import secrets
from pathlib import Path

import environ
from django.utils.csp import CSP

from conductor_site.client_address import trusted_proxies_parse
from conductor_site.config import conductor_settings
from conductor_site.layer_messages import channel_layer_keys
from conductor_site.private_files import (
    private_file,
    private_folder,
    private_sqlite_database,
)

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

DATA_DIR = Path(env.str("CONDUCTOR_DATA_DIR", default=str(BASE_DIR / "data"))).resolve()
# Private (0700), like the files in it: see conductor_site/private_files.py.
private_folder(DATA_DIR)


SECRET_KEY_FILE = DATA_DIR / "secret_key"


def _local_secret_key() -> str:
    """A per-installation key kept in the data folder, so no key is hard-coded."""
    path = SECRET_KEY_FILE
    private_file(path)
    if not path.read_text().strip():
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = env.str("SECRET_KEY", default="") or _local_secret_key()
# Earlier keys, newest first, while processes move to a new SECRET_KEY: Django
# still accepts what they signed, and the channel layer still opens messages
# they sealed (docs/security.md, "The channel layer between processes").
SECRET_KEY_FALLBACKS = env.list("SECRET_KEY_FALLBACKS", default=[])

# --- Conductor (SPEC §8) ------------------------------------------------------

# Every CONDUCTOR_* name of SPEC §8 becomes a Django setting of the same name.
_CONDUCTOR = conductor_settings(env, data_dir=DATA_DIR)
globals().update(_CONDUCTOR)

# Files that hold the secret key (the generated one, a .env that may set
# SECRET_KEY, the deploy kit's environment file): commands shell.run starts
# cannot read them (tools/shell.py), wherever they are.
CONDUCTOR_SECRET_FILES = (SECRET_KEY_FILE, BASE_DIR / ".env", Path("/etc/conductor.env"))

DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    # django.contrib.admin, with the console's site (its name, its index in the operator's order).
    "console.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "channels",
    "django_q",
    "conductor_site",
    # Lowest layer first: see ARCHITECTURE.md.
    "conversations",
    "mcp_servers",
    "automation",
    "tools",
    "ingest",
    "pipelines",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The Content-Security-Policy header (SECURE_CSP below) on every page.
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Serves the admin's static files: daphne serves none by itself.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Before anything queries: a NUL or a lone surrogate anywhere in a request is a 400.
    "conductor_site.unstorable_text.UnstorableTextMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # After the messages: a live refresh's fetch leaves them for the next page view.
    "console.live.LiveFetchMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "conductor_site.urls"
ASGI_APPLICATION = "conductor_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # The request's nonce, for {% csp_nonce_attr %} on the pages' <script> and <style>.
                "django.template.context_processors.csp",
            ],
        },
    },
]

# --- Database --------------------------------------------------------------

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'conductor.sqlite3'}")
}
# Channels closes connections older than this around every consumer database
# call; opening one per frame would cost more than the frame's own queries.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, with no health check for a connection used in the last
    # half second (conductor_site/db/postgresql).
    DATABASES["default"]["ENGINE"] = "conductor_site.db.postgresql"
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's backend, with one writer at a time per process queued in Python
    # rather than in SQLite's sleeping busy handler (conductor_site/db/sqlite3).
    DATABASES["default"]["ENGINE"] = "conductor_site.db.sqlite3"
    # The ASGI server and the django-q2 workers write one file. WAL lets readers
    # run beside the writer; IMMEDIATE takes the write lock when a transaction
    # begins, so two writers queue on the busy timeout instead of one failing
    # with "database is locked" when it upgrades a read lock mid-transaction.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        **DATABASES["default"].get("OPTIONS", {}),
    }
    # A file, not Django's in-memory default: tests start real processes that
    # must see the same test database.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-conductor.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, channel layer and django-q2 ------------------------------------

# The WebSocket consumers live in the ASGI server and the dispatcher in
# django-q2 worker processes, so the channel layer must cross processes.
# Give Redis a password (or an ACL user) and, across hosts, TLS:
#   REDIS_URL=redis://:PASSWORD@127.0.0.1:6379/0
#   REDIS_URL=rediss://conductor:PASSWORD@redis.internal:6380/0
# (docs/operations.md, "Redis"). Messages on either layer are sealed with a key
# derived from SECRET_KEY, so every process must share SECRET_KEY.
REDIS_URL = env.str("REDIS_URL", default="") or None
CHANNEL_LAYER_KEYS = channel_layer_keys(SECRET_KEY, SECRET_KEY_FALLBACKS)

Q_CLUSTER = {
    "name": "conductor",
    # A cluster run on its own holds the dispatcher loop in one worker
    # (automation.loop; under `serve` it returns, serve runs its own); the
    # others serve pruning and renewal.
    "workers": _CONDUCTOR["CONDUCTOR_Q_WORKERS"],
    # Every task but the dispatcher loop (queued with no timeout, see
    # automation.schedules) finishes within `timeout`. `retry` must exceed it,
    # or the ORM broker hands a task that is still running out again. It
    # does so with the loop after `retry`: that copy finds its server's loop
    # beating and returns within a tick.
    "timeout": _CONDUCTOR["CONDUCTOR_Q_TIMEOUT_SECONDS"],
    "retry": _CONDUCTOR["CONDUCTOR_Q_TIMEOUT_SECONDS"] + 60,
    "max_attempts": 1,
    "catch_up": False,
    "ack_failures": True,
    "save_limit": 1000,
    # What the cluster queues (the dispatcher loops, the per-minute schedules)
    # waits for nothing urgent: the ORM broker looks for it every second
    # rather than django-q2's 0.2 s, and the sentinel checks its workers
    # every 2 s rather than 0.5 s, so that an idle cluster costs next to
    # nothing. (The sentinel's status expires after 3 s: the cycle stays below.)
    "poll": 1.0,
    "guard_cycle": 2.0,
}

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "conductor_site.redis_layer.SealedRedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        # redis-py 8 times a read out after 5 s by default, which kills a
                        # receiver that waits on an idle channel (channels_redis issue 422).
                        "socket_timeout": None,
                        # Per process: a burst past it waits for a connection
                        # (conductor_site/redis_layer.py) rather than failing.
                        "max_connections": _CONDUCTOR["CONDUCTOR_REDIS_MAX_CONNECTIONS"],
                        "pool_timeout": 20,
                    }
                ],
                "symmetric_encryption_keys": CHANNEL_LAYER_KEYS,
                "prefix": env.str("CONDUCTOR_CHANNEL_PREFIX", default="conductor"),
                "capacity": 1000,
                "expiry": 60,
            },
        }
    }
    Q_CLUSTER["redis"] = REDIS_URL
else:
    # channels-lite's ORM layer on its own SQLite file, so its polling never
    # contends with the application's writes. (Its aiosqlite variant mixes
    # naive local and UTC timestamps and loses messages: not used.) A sender
    # rings the receiving process's doorbell after each message, so receivers
    # poll their channels only every `doorbell_fallback_interval` when idle
    # (conductor_site/channel_layer.py); `polling_interval` is for receivers
    # of general channels, which have no doorbell.
    INSTALLED_APPS.append("channels_lite")
    DATABASES["channels"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": env.str("CONDUCTOR_CHANNEL_LAYER_DB", default=str(DATA_DIR / "channels.sqlite3")),
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        },
        "TEST": {"NAME": str(DATA_DIR / "test-channels.sqlite3")},
    }
    DATABASE_ROUTERS = ["conductor_site.routers.ChannelLayerRouter"]
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "conductor_site.channel_layer.DoorbellSQLiteChannelLayer",
            "CONFIG": {
                "database": "channels",
                "symmetric_encryption_keys": CHANNEL_LAYER_KEYS,
                "polling_interval": 0.02,
                "doorbell_fallback_interval": 1.0,
                "capacity": 1000,
                "expiry": 60,
            },
        }
    }
    Q_CLUSTER["orm"] = "default"

# The sessions live in these files (and, with DATABASE_URL or
# CONDUCTOR_CHANNEL_LAYER_DB, possibly outside the data folder): 0600 from the start.
for _database in DATABASES.values():
    if _database["ENGINE"] in ("django.db.backends.sqlite3", "conductor_site.db.sqlite3"):
        private_sqlite_database(_database["NAME"])

# --- Auth, i18n, static ----------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# The admin's login is the only one: a login whose ``next`` is missing or
# points elsewhere (another host, a scheme) lands on the admin's index, not on
# Django's default /accounts/profile/, which does not exist here.
LOGIN_URL = "admin:login"
LOGIN_REDIRECT_URL = "admin:index"

# Admin login throttling (django-axes): after AXES_FAILURE_LIMIT wrong
# passwords for one username from one address, that pair is locked out for
# AXES_COOLOFF_MINUTES, even with the right password (docs/console.md, "Admin login").
# The pair, not the address alone: an attacker's failures lock out only the
# attacker's address, and every local process shares 127.0.0.1, as every
# browser shares a reverse proxy's address unless CONDUCTOR_TRUSTED_PROXIES
# names it.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env.float("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# The reverse proxies in front of the servers (addresses or networks): only a
# request from one of them has its client read from X-Forwarded-For; any
# other request is keyed on its own address, whatever header it sends
# (conductor_site/client_address.py; docs/operations.md, "The reverse proxy").
CONDUCTOR_TRUSTED_PROXIES = trusted_proxies_parse(env.list("CONDUCTOR_TRUSTED_PROXIES", default=[]))
AXES_CLIENT_IP_CALLABLE = "conductor_site.client_address.client_address"
AXES_RESET_ON_SUCCESS = True
# Every failure is logged by axes itself; its access log rows are not needed.
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False  # no banner at every start; failures and lockouts are still logged

LANGUAGE_CODE = "en-us"
# One time format in the console, ISO-like with the zone (conductor_site/formats/en/formats.py).
FORMAT_MODULE_PATH = ["conductor_site.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # filled by collectstatic (make run); served by WhiteNoise

# --- Security (effective when DEBUG is off) ---------------------------------

SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# What the admin's pages may load and run (docs/security.md, "The admin's pages"):
# their own static files, and <script>/<style> elements only with the page's nonce.
# No inline style="" attributes or event handlers (console/static/console/console.css
# holds what they would say), no other origins, no plugins, no framing, forms only
# to this server. A page's text is the chat's and the plugins': should escaping ever
# fail, injected markup still runs no script.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
# Conductor listens on the loopback interface over plain HTTP by default; TLS,
# when it is exposed further, is a reverse proxy's job. HTTPS_ONLY switches on
# every HTTPS-only protection at once. Without it, the deploy checks that only
# make sense behind TLS are silenced on purpose rather than left as noise.
HTTPS_ONLY = env.bool("HTTPS_ONLY", default=False)
if HTTPS_ONLY:
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # HSTS for every subdomain, and the browsers' preload list, bind other
    # sites of the domain and are hard to undo: the operator opts in, and
    # the deploy checks do not nag while they have not.
    SILENCED_SYSTEM_CHECKS = [
        check
        for check, is_on in (("security.W005", SECURE_HSTS_INCLUDE_SUBDOMAINS), ("security.W021", SECURE_HSTS_PRELOAD))
        if not is_on
    ]
else:
    SILENCED_SYSTEM_CHECKS = [
        "security.W004",  # SECURE_HSTS_SECONDS
        "security.W008",  # SECURE_SSL_REDIRECT
        "security.W012",  # SESSION_COOKIE_SECURE
        "security.W016",  # CSRF_COOKIE_SECURE
    ]

# --- Logging ----------------------------------------------------------------

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "filters": {
        "one_line_refusals": {"()": "core.logfmt.OneLineRefusals"},
        "one_line_foreign_tasks": {"()": "core.logfmt.OneLineForeignTasks"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    # A refused request (an admin 403, a 404) is one line, not a traceback; so
    # is, once a minute, a queued task signed with another SECRET_KEY.
    "loggers": {
        "django.request": {"filters": ["one_line_refusals"]},
        "django-q": {"filters": ["one_line_foreign_tasks"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}

