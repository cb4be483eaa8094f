"""Every setting Conductor reads from its environment, documented in one table.

``docs/configuration.md`` is written from this table (``manage.py
configuration_doc``), and ``tests/conductor_site/test_settings_reference.py``
fails when a name read in ``settings.py`` or ``config.py`` is missing here,
when a name here is read nowhere, when a documented default is not the one
the code uses, or when the page is older than the table.

Pure: no Django import, so the page can be rendered without settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One environment variable.

    ``default`` is the value as one would write it in the environment (``""``:
    empty), and setting it explicitly must change nothing. ``None`` means the
    default is computed (a path in the data folder, a generated key);
    ``computed`` then says what it is.
    """

    name: str
    default: str | None
    what: str
    computed: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    settings: tuple[Setting, ...]


SECTIONS: tuple[Section, ...] = (
    Section(
        "Storage and processes",
        "Where the data lives and how the ASGI servers and the django-q2 clusters share it "
        "([Getting started](getting-started.md#several-processes-one-system), "
        "[Operations](operations.md)).",
        (
            Setting(
                "DATABASE_URL", None,
                "The application database. A PostgreSQL URL lets any number of servers and clusters run side by side.",
                computed="SQLite file `conductor.sqlite3` in the data folder (WAL, `IMMEDIATE` transactions, 30 s busy timeout)",
            ),
            Setting(
                "REDIS_URL", "",
                "Unset: the embedded defaults (channels-lite's layer on SQLite, django-q2's ORM broker). "
                "Set: the Redis channel layer and django-q2's Redis broker; give each installation a Redis database of its own.",
            ),
            Setting(
                "CONDUCTOR_REDIS_MAX_CONNECTIONS", "100",
                "The most Redis connections one process's channel layer opens; a call past that waits up to 20 s "
                "for one (docs/operations.md, Redis).",
            ),
            Setting(
                "CONDUCTOR_DATA_DIR", None,
                "The data folder: databases, the generated secret key, static files, the workspace. Kept mode 700, its SQLite databases 600.",
                computed="`data` in the project folder",
            ),
            Setting(
                "CONDUCTOR_CHANNEL_LAYER_DB", None,
                "The channel layer's own SQLite file (embedded default only).",
                computed="`channels.sqlite3` in the data folder",
            ),
            Setting(
                "CONDUCTOR_CHANNEL_PREFIX", "conductor",
                "The prefix of the channel layer's Redis keys (with `REDIS_URL` only).",
            ),
            Setting("CONN_MAX_AGE", "60", "Seconds a database connection is reused."),
            Setting(
                "CONDUCTOR_Q_WORKERS", "4",
                "django-q2 workers, at least 2: one runs the scheduled dispatcher loop where `serve` does not "
                "run one (a cluster on its own), the others serve renewal and pruning.",
            ),
            Setting(
                "CONDUCTOR_Q_TIMEOUT_SECONDS", "300",
                "How long a django-q2 task other than the dispatcher loop may run before the cluster kills it.",
            ),
            Setting(
                "CONDUCTOR_RETENTION_DAYS", "30",
                "`manage.py prune` (daily) deletes finished tasks, their events and messages older than this.",
            ),
        ),
    ),
    Section(
        "The web server",
        "`make run` listens on `HOST`:`PORT`; behind a TLS proxy, see [Operations](operations.md).",
        (
            Setting("HOST", "127.0.0.1", "Where `make run` (`manage.py serve`) listens; also the default `--server-url` of `create_plugin_client`."),
            Setting("PORT", "8000", "The port `make run` listens on."),
            Setting(
                "SECRET_KEY", None,
                "Signs sessions and django-q2's queued tasks, and derives the key MCP secrets are sealed with "
                "(rotating it means entering them again). Every server and cluster of one installation must share it.",
                computed="generated once into `secret_key` in the data folder (mode 600)",
            ),
            Setting(
                "SECRET_KEY_FALLBACKS", "",
                "Earlier secret keys, comma-separated, still accepted while a new `SECRET_KEY` rolls out: sessions "
                "and channel-layer messages sealed with them still open (docs/operations.md, rotating the key).",
            ),
            Setting("DEBUG", "false", "Django's debug mode. Never on a server others can reach."),
            Setting(
                "ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]",
                "Host names the server answers to (comma-separated); add yours with `HOST=0.0.0.0` or behind a proxy.",
            ),
            Setting(
                "CSRF_TRUSTED_ORIGINS", "",
                "Origins (comma-separated, with scheme) whose admin form posts Django accepts besides the site's own.",
            ),
            Setting(
                "HTTPS_ONLY", "false",
                "`true` behind a TLS proxy: secure cookies, HSTS, the HTTPS redirect, `X-Forwarded-Proto` trusted.",
            ),
            Setting("SECURE_HSTS_SECONDS", "31536000", "HSTS max-age (with `HTTPS_ONLY`)."),
            Setting(
                "SECURE_HSTS_INCLUDE_SUBDOMAINS", "false",
                "HSTS for every subdomain too (with `HTTPS_ONLY`): it binds the domain's other sites, so opt in.",
            ),
            Setting("SECURE_HSTS_PRELOAD", "false", "Ask for the browsers' HSTS preload list (with `HTTPS_ONLY`); hard to undo."),
            Setting("LOG_LEVEL", "INFO", "The root logger's level."),
            Setting(
                "CONDUCTOR_METRICS_TOKEN", "",
                "Empty: `/metrics` only for a staff session. Set: the bearer token a scraper sends ([Metrics](metrics.md)).",
            ),
            Setting(
                "CONDUCTOR_CAPTURE_SILENCE_HOURS", "24",
                "A platform that had captures and has none for this long gets a warning on the overview.",
            ),
        ),
    ),
    Section(
        "Admin login",
        "Throttled by django-axes ([The console](console.md#admin-login)).",
        (
            Setting("AXES_FAILURE_LIMIT", "5", "Wrong admin passwords for one username from one address before it is locked out."),
            Setting("AXES_COOLOFF_MINUTES", "15", "How long that lockout lasts; a wrong password during it restarts it."),
            Setting(
                "CONDUCTOR_TRUSTED_PROXIES", "",
                "The reverse proxies in front of the servers, comma-separated addresses or networks "
                "(`10.0.0.5`, `10.0.0.0/24`). A request from one of them is counted against the address it "
                "forwards in `X-Forwarded-For` (the right-most one that is not a trusted proxy); any other "
                "request against its own address, whatever it sends. Behind a proxy, name it here, or every "
                "failure counts against the proxy's address ([Operations](operations.md#the-reverse-proxy)).",
            ),
        ),
    ),
    Section(
        "The plugin socket",
        "`/ws/plugin/` and its frames ([Protocol](protocol.md)).",
        (
            Setting(
                "CONDUCTOR_PLUGIN_ORIGINS", "",
                "Web origins (comma-separated) allowed to open the socket. Empty: extension origins and clients without an origin only.",
            ),
            Setting("CONDUCTOR_MAX_FRAMES_PER_SECOND", "50", "Frames a socket may send per second; the ones over it get `rate_limited`."),
            Setting(
                "CONDUCTOR_PING_INTERVAL_SECONDS", "20",
                "How often a live socket refreshes its client's presence (and its channel-layer group); "
                "a client counts as gone after twice this, at most 60 s.",
            ),
            Setting("CONDUCTOR_HELLO_TIMEOUT_SECONDS", "10", "A socket without a `hello` by then is closed with `4408`."),
            Setting(
                "CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES", "16777216",
                "The largest WebSocket message a plugin socket takes. Up to it, a frame over 1 MiB is dropped as it arrives, "
                "unread, and answered `too_large`; over it, the socket is closed with `1009`.",
            ),
            Setting(
                "CONDUCTOR_OLDEST_PLUGIN_VERSION", "1.0.0",
                "A plugin whose `hello` names an older (or no) `plugin_version` is told `\"plugin_outdated\": true` in `hello.ok`, "
                "and says so. Empty: every version is supported.",
            ),
        ),
    ),
    Section(
        "The dispatcher",
        "How tasks are claimed, retried and leased ([The dispatcher](dispatcher.md)).",
        (
            Setting("CONDUCTOR_TICK_SECONDS", "2", "Seconds between the dispatcher loop's ticks (wake-ups claim sooner)."),
            Setting(
                "CONDUCTOR_SERVER_NAME", None,
                "The server a dispatcher loop runs for; `serve` sets host:port for its own processes. A scheduled "
                "loop returns while an older loop of its server runs.",
                computed="the host name",
            ),
            Setting("CONDUCTOR_MAX_TASKS_PER_TICK", "20", "Tasks one tick claims at most."),
            Setting("CONDUCTOR_LEASE_SECONDS", "60", "A claimed task's lease, renewed every third of it while it runs."),
            Setting("CONDUCTOR_MAX_ATTEMPTS", "3", "Runs of a task in all before a retryable failure becomes terminal."),
            Setting("CONDUCTOR_RETRY_BACKOFF_SECONDS", "5,15,45", "Waits before each retry, in seconds (the last one repeats)."),
            Setting("CONDUCTOR_RETRY_JITTER_MAX_MS", "1000", "Random jitter added to each retry's wait, at most."),
            Setting(
                "CONDUCTOR_PART_AWAY_MAX_MINUTES", "15",
                "How long a task waits, using no attempt, for a part of the server that does not answer (the "
                "database, the channel layer) before it fails naming the part.",
            ),
            Setting("CONDUCTOR_OUTBOUND_JITTER_MAX_MS", "800", "Random delay before an outbound delivery, at most."),
        ),
    ),
    Section(
        "Instructions, tools and deliveries",
        "[Instructions and tools](instructions.md), [Delivery methods](delivery.md).",
        (
            Setting(
                "CONDUCTOR_WORKSPACE", None,
                "The folder the tools work in (created when missing).",
                computed="`workspace` in the data folder",
            ),
            Setting(
                "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR", "120",
                "Valid blocks per conversation in a rolling hour; also paces mail (three back to back, then one per interval).",
            ),
            Setting(
                "CONDUCTOR_MAIL_BETWEEN_OWNERS", "",
                "Pairs of owners whose conversations may mail each other (both ways), comma-separated, "
                "e.g. `alice:bob,alice:carol`. Empty: mail stays within each owner, and another owner's handle "
                "is answered as an unknown one ([Mail](mail.md#whose-handles)).",
            ),
            Setting("CONDUCTOR_SHELL_MAX_TIMEOUT_SECONDS", "300", "The longest `timeout_s` a `shell.run` may ask for."),
            Setting(
                "CONDUCTOR_SHELL_UNCONFINED", "false",
                "`true`: run `shell.run` commands and stdio MCP servers even where the kernel refuses a part of "
                "their sandbox (Landlock, the namespaces that take away the network and other processes), "
                "seeing and reaching more than they should; `manage.py doctor` says what is missing. "
                "Off: they are refused there ([Security](security.md#what-a-command-sees-and-reaches)).",
            ),
            Setting("CONDUCTOR_RESULT_MAX_CHARS", "20000", "The longest results text posted back to a chat; the largest results give way to previews."),
            Setting(
                "CONDUCTOR_RESULT_STORE_MAX_BYTES", "1048576",
                "The most of one tool's result stored (JSON bytes, at least 1024); a larger one is stored as its "
                "start with its size and `result_cut`, and the delivery says it was cut.",
            ),
            Setting("CONDUCTOR_DELIVERY_TIMEOUT_SECONDS", "30", "How long a delivery waits for the plugin's answer before it is retried."),
            Setting(
                "CONDUCTOR_DELIVERY_METHODS", "",
                "Each platform's order of delivery methods, e.g. `chatgpt=http,dom;http,dom`. "
                "Empty: each platform's own (`http,dom`, ChatGPT `dom`).",
            ),
            Setting("CONDUCTOR_MCP_SERVERS", "", "A JSON file of MCP servers in the `mcpServers` shape, loaded by `make run`."),
            Setting("CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS", "300", "The longest call timeout an MCP server may have."),
            Setting(
                "CONDUCTOR_MCP_KEEP_ALIVE", "true",
                "A stdio MCP server stays up between calls, one per worker process; `false`: a fresh process per call.",
            ),
            Setting(
                "CONDUCTOR_MCP_ALLOW_PRIVATE_URLS", "false",
                "`true`: a Streamable HTTP MCP server's URL may reach loopback, link-local and private addresses "
                "(`localhost`, `127.0.0.1`, `::1`, `169.254.x.x`, `10.x.x.x`, `192.168.x.x`, `fc00::/7`...). "
                "Off, such a URL is refused when saved or loaded, and a name that resolves to one is refused "
                "when connected to.",
            ),
        ),
    ),
)

SETTINGS: tuple[Setting, ...] = tuple(setting for section in SECTIONS for setting in section.settings)

GENERATED_NOTE = (
    "<!-- Written by `manage.py configuration_doc` from conductor_site/settings_reference.py: "
    "edit that table, not this page. -->"
)


def _default_cell(setting: Setting) -> str:
    if setting.default is None:
        return setting.computed
    if setting.default == "":
        return "empty"
    return f"`{setting.default}`"


def configuration_markdown() -> str:
    """The whole of ``docs/configuration.md``."""
    lines = [
        GENERATED_NOTE,
        "",
        "# Configuration",
        "",
        "Settings come from the environment or from a `.env` file at the project root. "
        "A value out of range stops start-up with an error naming the setting.",
        "",
    ]
    for section in SECTIONS:
        lines += [f"## {section.title}", "", section.intro, "", "| name | default | what |", "|---|---|---|"]
        lines += [
            f"| `{setting.name}` | {_default_cell(setting)} | {setting.what} |" for setting in section.settings
        ]
        lines.append("")
    return "\n".join(lines)
