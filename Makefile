# The two set-up commands of the README, `make run` and `make test`, the quick
# `make test-fast`, `make docs` (the documentation site), and `make bench`,
# `make soak` and `make deploy-check`. Each installs what is missing (uv,
# Python 3.12 packages into .venv) first.

UV := $(shell bin/ensure-uv)
ifeq ($(UV),)
$(error uv is missing and could not be installed)
endif

# The app's own commands run without the test and docs groups (uv run would install them).
APP_RUN := $(UV) run --frozen --no-default-groups

PYTEST_WORKERS ?= 2
PYTEST_ARGS ?= --durations=25
BENCH_ARGS ?=
MINUTES ?= 10
SOAK_ARGS ?=
FAULTS_ARGS ?=
NODE ?= node
HOST ?= 127.0.0.1
PORT ?= 8000
export HOST PORT

# `make test-fast`: the pure modules and the services, the admin through the
# test client, in one process: no server, browser or worker process is started.
# About 35 s on two cores doing nothing else; a change to what these do not reach
# (sockets, processes, the plugin in Chromium) still needs `make test`.
FAST_TESTS ?= tests/test_architecture.py tests/core tests/platforms \
	tests/automation/test_transitions.py tests/automation/test_retry.py tests/automation/test_claim.py \
	tests/automation/test_operator.py tests/automation/test_kinds.py \
	tests/ingest/test_blocks.py tests/ingest/test_messages.py tests/ingest/test_pairing.py tests/pipelines/test_results_text.py \
	tests/tools/test_tools_registry.py tests/tools/test_tool_policies.py tests/tools/test_checks.py \
	tests/console/test_story.py tests/console/test_admin_tasks.py tests/console/test_admin_overview.py \
	tests/console/test_admin_pairing.py tests/console/test_first_run.py \
	tests/conductor_site/test_health.py

# The plugin's unit tests, a dot each (failures in full at the end).
NODE_TESTS = $(NODE) --test --test-reporter=dot plugin/tests/*.test.js

.PHONY: install install-test test test-fast migrate run user check doctor bench profile soak deploy-check plugin docs screenshots

# What the app needs (`make run`, `make check`, `make doctor`): the project's
# Python packages, without the test and docs tools, and nothing from npm.
# --inexact keeps what `make install-test` added.
install:
	$(UV) sync --frozen --no-default-groups --inexact

# What the tests, the docs and the benchmarks need besides: the dev and docs
# groups (pytest, Playwright's driver, mkdocs, ...), the MCP servers the
# tests call and web-ext, which lints the plugin's Firefox package.
install-test: tests/mcp_servers/node_modules/.installed tests/web_ext/node_modules/.installed
	$(UV) sync --frozen

# The MCP servers the tests call (tests/mcp_servers/package.json), from its
# lock, again only when the lock changed.
tests/mcp_servers/node_modules/.installed: tests/mcp_servers/package-lock.json
	npm ci --prefix tests/mcp_servers --no-audit --no-fund --loglevel=error
	touch $@

# Mozilla's web-ext (tests/web_ext/package.json), from its lock, in a tree of
# its own so that neither moves the other's packages.
tests/web_ext/node_modules/.installed: tests/web_ext/package-lock.json
	npm ci --prefix tests/web_ext --no-audit --no-fund --loglevel=error
	touch $@

# The layers contract first (pyproject.toml, ARCHITECTURE.md), then the
# plugin's pure modules (Node 20+), then the Python suite (the tests marked
# `alone`, which load the whole machine, last and by themselves); at the end,
# how long it all took. The shell expands the glob: Node 20 also searches a
# directory argument for *.test.js, later versions read arguments as globs,
# and the explicit list means the same to both.
test: install-test
	@echo "make test: the layers, the plugin's unit tests, then the whole Python suite" \
		"(10 to 20 minutes on two cores; make test-fast checks the core in under one)"
	@start=$$(date +%s); \
	$(UV) run --frozen lint-imports --no-cache && \
	$(NODE_TESTS) && \
	$(UV) run --frozen pytest -n $(PYTEST_WORKERS) -m "not alone" $(PYTEST_ARGS) && \
	$(UV) run --frozen pytest -p no:cacheprovider -m alone $(PYTEST_ARGS); \
	status=$$?; bin/took "make test" $$start $$status

test-fast: install-test
	@start=$$(date +%s); \
	$(UV) run --frozen lint-imports --no-cache >/dev/null && \
	$(NODE_TESTS) && \
	$(UV) run --frozen pytest -q -p no:cacheprovider $(FAST_TESTS); \
	status=$$?; bin/took "make test-fast" $$start $$status

migrate: install
	$(APP_RUN) python manage.py migrate_all

# On a first run (no admin user yet) it first prints one line saying how to make one.
run: migrate
	$(APP_RUN) python manage.py collectstatic --noinput --verbosity 0
	$(APP_RUN) python manage.py first_run_hint --host $(HOST) --port $(PORT)
	$(APP_RUN) python manage.py serve --host $(HOST) --port $(PORT)

# The first admin user (Django's createsuperuser, asking for a name and a password).
user: migrate
	$(APP_RUN) python manage.py createsuperuser

# The plugin as a person or a store installs it: dist/conductor-plugin-<version>.zip,
# the version from plugin/manifest.json, without the plugin's tests, and beside it
# dist/conductor-plugin-<version>-firefox.zip, the same files with a manifest for Firefox.
plugin:
	bin/build-plugin

# The documentation site (mkdocs.yml, docs/) into site/, failing on a broken
# link, an anchor that is gone or a page outside the nav; first, whether
# docs/configuration.md is still what the settings table gives (rewrite it
# with `.venv/bin/python manage.py configuration_doc`).
docs: install-test
	$(UV) run --frozen python manage.py configuration_doc --check
	NO_MKDOCS_2_WARNING=1 $(UV) run --frozen mkdocs build --strict --quiet

# The docs' pictures of the console and the plugin (docs/img), as the browser
# tests take them in Debian's Chromium; commit the ones that changed.
screenshots: install-test
	CONDUCTOR_SCREENSHOT_DIR=docs/img $(UV) run --frozen pytest -q -p no:cacheprovider \
		tests/console/test_admin_browser_outcomes.py tests/console/test_admin_browser.py tests/plugin/test_pairing.py \
		tests/plugin/test_side_panel.py

check: install
	$(APP_RUN) python manage.py check
	$(APP_RUN) python manage.py makemigrations --check --dry-run

# Whether this machine can run what Conductor needs: shell.run's sandbox
# (the launcher's own test of the kernel, then a command in the sandbox).
doctor: install
	$(APP_RUN) python manage.py doctor

# The issue's goals in both configurations, as one table (bench/README.md);
# PostgreSQL + Redis are skipped when they do not answer. About ten minutes, half of
# it the scale phase on PostgreSQL, whose chart needs the bench group (matplotlib).
bench: install-test
	$(UV) run --frozen --group bench python bench/suite.py $(BENCH_ARGS)

# Where the server's CPU goes under the cost phase's load: py-spy (the bench
# group) over daphne and the dispatcher loop, the top frames of each
# (bench/README.md). The embedded default; with DATABASE_URL and REDIS_URL set,
# on those (the database must exist). Needs ptrace: root, or ptrace_scope 0.
profile: install-test
	$(UV) run --frozen --group bench python bench/profile.py $(PROFILE_ARGS)

# Simulated plugins on two servers and two clusters on PostgreSQL + Redis for
# MINUTES minutes, then a minute of load with faults (Redis, the database's
# connections and the whole server; on the embedded default, the server) on
# each configuration (bench/README.md); fails when a message was lost or duplicated.
soak: install-test
	$(UV) run --frozen python bench/soak.py --minutes $(MINUTES) $(SOAK_ARGS)
	$(UV) run --frozen python bench/faults.py $(FAULTS_ARGS)

# The operator's kit in deploy/, checked by the programs that read it
# (tests/deploy): promtool check rules, promtool test rules and promtool check
# metrics over a live /metrics; nginx -t on the site, then nginx with it in
# front of a running server. Needs Debian's prometheus and nginx packages.
deploy-check: install-test
	CONDUCTOR_REQUIRE_TOOLS=1 $(UV) run --frozen pytest -q tests/deploy
