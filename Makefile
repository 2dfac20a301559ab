# The two commands of the README: `make setup` installs everything, `make test` runs the tests.
PYTHON ?= python3

.PHONY: setup pgbouncer-service-off etcd-service-off test lint quickstart bench lock

setup:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus)
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer && \
	   $(MAKE) --no-print-directory pgbouncer-service-off)
	@test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime)
	@command -v chromium >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)
	@command -v patroni >/dev/null && command -v etcd >/dev/null && command -v etcdctl >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	   patroni etcd-server etcd-client && $(MAKE) --no-print-directory etcd-service-off)
	$(PYTHON) -m pip install -q -e '.[dev,embedded,web]'

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

# requirements.lock: the image's dependencies, pinned with the hashes of every file of
# each release. pip-tools runs from a throwaway virtualenv: a tool, not a dependency.
lock:
	$(PYTHON) -m venv /tmp/pgfleet-piptools
	/tmp/pgfleet-piptools/bin/pip install -q pip-tools
	/tmp/pgfleet-piptools/bin/pip-compile --quiet --strip-extras --generate-hashes \
	  --allow-unsafe --build-deps-for=wheel --no-emit-index-url --no-emit-find-links \
	  --output-file requirements.lock pyproject.toml
