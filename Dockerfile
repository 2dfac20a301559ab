# syntax=docker/dockerfile:1
# pgfleet with the example app. Build: docker build -t pgfleet-example .
#   docker run --rm -e PGFLEET_DATABASE_URL=... pgfleet-example migrate   # the schema, once per release
#   docker run -e PGFLEET_DATABASE_URL=... pgfleet-example                # the supervisor of this host
# For your own app, copy your package instead of examples/ and point CMD at its file.

ARG PYTHON_VERSION=3.12

# ---- build: a virtualenv with pgfleet and its dependencies ---------------------------
FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/pgfleet
# Every dependency (and the build backend) at the version and hash of requirements.lock
# (`make lock` writes it): a changed or substituted file on the index fails the build.
# The lock holds the extras the docs install too (web, otel, embedded), so the image
# can run `pgfleet web` and the OpenTelemetry hooks.
COPY requirements.lock ./
RUN /opt/pgfleet/bin/pip install --no-cache-dir --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY src ./src
# pgfleet itself from this source only: no dependency resolved, no build backend fetched.
RUN /opt/pgfleet/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
 && /opt/pgfleet/bin/pip uninstall --yes setuptools

# ---- runtime: the virtualenv, the app, a non-root user --------------------------------
FROM python:${PYTHON_VERSION}-slim AS runtime
LABEL org.opencontainers.image.title="pgfleet" \
      org.opencontainers.image.description="Background jobs on PostgreSQL: supervisor, workers, cron, metrics"
RUN groupadd --system --gid 10001 pgfleet \
 && useradd --system --uid 10001 --gid pgfleet --home-dir /app --shell /usr/sbin/nologin pgfleet
# The code stays root's: the runtime user can read and run it, not change it.
COPY --from=build /opt/pgfleet /opt/pgfleet
WORKDIR /app
COPY examples ./examples
ENV PATH=/opt/pgfleet/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    EXAMPLE_DATA_DIR=/tmp/example \
    PROMETHEUS_MULTIPROC_DIR=/tmp/pgfleet-metrics \
    PGFLEET_METRICS_LISTEN=0.0.0.0:9464
USER 10001:10001
EXPOSE 9464
# The supervisor is PID 1: it handles TERM/INT/QUIT/HUP itself and reaps every child,
# orphans included (waitpid(-1)), so no init is needed. One-off commands such as
# `migrate` run as PID 1 too; give them `docker run --init` if they must react to Ctrl-C.
STOPSIGNAL SIGTERM
# slim has no curl: the standard library asks the exporter's /livez.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('PGFLEET_LIVEZ_URL', 'http://127.0.0.1:9464/livez'), timeout=4)"]
ENTRYPOINT ["pgfleet"]
CMD ["--log-format", "json", "run", "-c", "examples/pgfleet.yaml"]
