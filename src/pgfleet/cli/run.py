"""`pgfleet run`: the supervisor of this host."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections.abc import Callable

import click

from pgfleet.cli.common import (
    EXIT_USAGE,
    config_dsn,
    fail,
    friendly,
    global_options,
    load_or_exit,
    refuse_permanent_connection_errors,
    report,
    required_config_path,
)
from pgfleet.cli.preflight import check_in_child, web_problems
from pgfleet.config import Config
from pgfleet.runtime import early_signals, metrics_dir as metrics_dirs
from pgfleet.runtime.child import STOP_SIGNALS, keep_stops
from pgfleet.runtime.private_dirs import RefusedDirectory


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
    supervise(path, config, dsn)


def supervise(path: str, config: Config, dsn: str,
              adjust: Callable[[Config], Config] | None = None) -> None:
    """Check the file's last details and run the supervisor until it stops; exits with
    its code. `adjust` changes the config as read, now and at every reload (`pgfleet
    dev` adds its web UI that way)."""
    # A stop asked for while pgfleet was imported (early_signals) or during the checks
    # below (they import the task modules, which may take seconds) is kept for the
    # supervisor, not left to the default action, which would end the process with 143
    # and no word in its log.
    early = early_signals.take()
    keep_stops(early)
    # So is a reload (HUP), whose default action would end the process with 129 (a
    # `reload` seconds after a start on a loaded host); the supervisor reads the file
    # again once it runs. And TTIN / TTOU, whose default action would suspend it.
    for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, lambda signum, _frame: early.append(signum))
    if adjust is not None:
        config = adjust(config)
    # First: the checks below may import task modules, and a module that imports
    # pgfleet.metrics writes into the directory at once.
    metrics_dir = fresh_metrics_dir()
    try:
        report(*check_in_child(config))
        report(web_problems(config, dsn), [])
        refuse_permanent_connection_errors(dsn, "pgfleet run")
        # Imported only now: prometheus-client reads PROMETHEUS_MULTIPROC_DIR at import.
        from pgfleet.supervisor.arbiter import Supervisor

        code = Supervisor(path, config, dsn, adjust=adjust, signals=early).run()
    finally:
        if metrics_dir is not None:
            metrics_dirs.release(metrics_dir)
    # Stopped: a stop signal now has nothing left to stop. Python puts back the default
    # action of its handlers as it exits, so a TERM landing then would end the process
    # with 143 after "supervisor stopped", a HUP with 129, and a TTIN or TTOU would
    # suspend it before its exit.
    for sig in (*STOP_SIGNALS, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)


def fresh_metrics_dir() -> metrics_dirs.MetricsDirectory | None:
    """A per-boot directory for prometheus-client's multiprocess files, so counters of a
    previous run never leak into this one; None when the given one cannot be written."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not given:
        path = tempfile.mkdtemp(prefix="pgfleet-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
        return metrics_dirs.own_directory(path)
    try:
        return metrics_dirs.fresh_directory(given)
    except RefusedDirectory as exc:
        fail(f"PROMETHEUS_MULTIPROC_DIR: {exc}", EXIT_USAGE)
    except OSError as exc:
        # This account's, but not writable (read-only, full): metrics must never stop the
        # jobs. Each process then finds it cannot write its file and turns its metrics off
        # with one line of its own (pgfleet/metrics/storage.py).
        click.echo(f"pgfleet: PROMETHEUS_MULTIPROC_DIR {given}: {exc}; metrics will "
                   "be off", err=True)
        return None
