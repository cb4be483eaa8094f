# The two set-up commands of the README, `make run` and `make test`, and
# `make bench` and `make soak`. Each installs what is missing (uv, Python 3.12 packages into
# .venv) first.

UV := $(shell bin/ensure-uv)
ifeq ($(UV),)
$(error uv is missing and could not be installed)
endif

PYTEST_WORKERS ?= 2
PYTEST_ARGS ?= --durations=25
BENCH_ARGS ?=
MINUTES ?= 10
SOAK_ARGS ?=
NODE ?= node
HOST ?= 127.0.0.1
PORT ?= 8000
export HOST PORT

.PHONY: install test migrate run check bench soak

install: tests/mcp_servers/node_modules/.installed
	$(UV) sync --frozen

# The MCP servers the tests call (tests/mcp_servers/package.json), from its
# lock, again only when the lock changed.
tests/mcp_servers/node_modules/.installed: tests/mcp_servers/package-lock.json
	npm ci --prefix tests/mcp_servers --no-audit --no-fund --loglevel=error
	touch $@

# The layers contract first (pyproject.toml, ARCHITECTURE.md), then the
# plugin's pure modules (Node 20+). The shell expands the glob:
# Node 20 also searches a directory argument for *.test.js, later versions
# read arguments as globs, and the explicit list means the same to both.
test: install
	$(UV) run --frozen lint-imports --no-cache
	$(NODE) --test plugin/tests/*.test.js
	$(UV) run --frozen pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

migrate: install
	$(UV) run --frozen python manage.py migrate_all

run: migrate
	$(UV) run --frozen python manage.py collectstatic --noinput --verbosity 0
	$(UV) run --frozen python manage.py serve --host $(HOST) --port $(PORT)

check: install
	$(UV) run --frozen python manage.py check
	$(UV) run --frozen python manage.py makemigrations --check --dry-run

# The issue's goals in both configurations, as one table (bench/README.md);
# PostgreSQL + Redis are skipped when they do not answer. About five minutes.
bench: install
	$(UV) run --frozen python bench/suite.py $(BENCH_ARGS)

# Simulated plugins on two servers and two clusters on PostgreSQL + Redis for
# MINUTES minutes (bench/README.md); fails when a message was lost or duplicated.
soak: install
	$(UV) run --frozen python bench/soak.py --minutes $(MINUTES) $(SOAK_ARGS)
