"""`pgfleet run`: the supervisor of this host."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import click

from pgfleet.cli.common import (
    EXIT_USAGE,
    config_dsn,
    fail,
    friendly,
    global_options,
    load_or_exit,
    report,
    required_config_path,
)
from pgfleet.cli.preflight import check_in_child
from pgfleet.private_dirs import RefusedDirectory


@click.command()
@global_options
@friendly
def run() -> None:
    """Run the supervisor of this host: workers, maintenance, scheduler, exporter."""
    path = required_config_path()
    config = load_or_exit(path)
    dsn = config_dsn(config, discover=False)
    if not dsn:
        fail("no database URL: set database_url in the file, pass --database-url or set "
             "PGFLEET_DATABASE_URL", EXIT_USAGE)
    report(*check_in_child(config))
    metrics_dir = fresh_metrics_dir()
    try:
        # Imported only now: prometheus-client reads PROMETHEUS_MULTIPROC_DIR at import.
        from pgfleet.supervisor.arbiter import Supervisor

        code = Supervisor(path, config, dsn).run()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    sys.exit(code)


def fresh_metrics_dir() -> str:
    """A per-boot directory for prometheus-client's multiprocess files, so counters of a
    previous run never leak into this one."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        # prometheus-client is imported only now, with the variable set.
        from pgfleet import metrics_files

        try:
            metrics_files.fresh_directory(given)
        except (RefusedDirectory, OSError) as exc:
            fail(f"PROMETHEUS_MULTIPROC_DIR: {exc}", EXIT_USAGE)
        path = given
    else:
        path = tempfile.mkdtemp(prefix="pgfleet-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path
