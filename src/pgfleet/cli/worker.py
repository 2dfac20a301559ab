"""`pgfleet worker`: one worker in the foreground, without a supervisor."""

from __future__ import annotations

import sys
from typing import Any

import click
from pydantic import ValidationError
from setproctitle import setproctitle

from pgfleet.cli.common import (
    EXIT_USAGE,
    chosen_dsn,
    fail,
    friendly,
    global_options,
    refuse_permanent_connection_errors,
    working_directory_last,
)
from pgfleet.config import Config, QueueConfig
from pgfleet.sql.db import first_line


@click.command()
@click.option("--queue", "queue_name", required=True, help="The queue to work.")
@click.option("--tasks", "modules", required=True, multiple=True,
              help="Module whose @task functions may run (repeatable).")
# No defaults here: an option not given keeps the config models' default (one set of
# defaults for supervised workers, this command and tests).
@click.option("--threads", type=int, default=None,
              help="Jobs run at once (default: the queue default).")
@click.option("--poll-interval", type=float, default=None,
              help="Seconds between polls (default: the queue default).")
@click.option("--no-notify", is_flag=True, help="Poll only; do not LISTEN.")
@click.option("--middleware", "middleware_names", multiple=True,
              help="Callable module.name wrapping every job (repeatable, outermost first).")
@click.option("--timeout", type=float, default=None,
              help="Seconds a job may run (default: the queue default).")
@global_options
@friendly
def worker(queue_name: str, modules: tuple[str, ...], threads: int | None,
           poll_interval: float | None, no_notify: bool, middleware_names: tuple[str, ...],
           timeout: float | None) -> None:
    """Run one worker process in the foreground (the supervisor forks these)."""
    # Imported here: the worker and the task registry are heavy, and only this command
    # needs them.
    from pgfleet import middleware
    from pgfleet.errors import PgfleetError
    from pgfleet.tasks import load_registry
    from pgfleet.worker import Worker
    from pgfleet.worker.settings import build_settings

    working_directory_last()
    for module in modules:
        try:
            load_registry([module])
        except Exception as exc:
            fail(f"--tasks {module}: cannot import it: {type(exc).__name__}: "
                 f"{first_line(exc)}", EXIT_USAGE)
    registry = load_registry(modules)
    try:
        middleware.load(middleware_names)
    except PgfleetError as exc:
        fail(f"--middleware: {exc}", EXIT_USAGE)
    # The name `ps` shows, and the application_name of this worker's connections.
    setproctitle(f"pgfleet worker {queue_name}")
    dsn = chosen_dsn()
    # A wrong password, role or database: one line and exit 1, as `pgfleet run` does,
    # rather than a retry loop that can never succeed.
    refuse_permanent_connection_errors(dsn, f"pgfleet worker {queue_name}")
    w = Worker(build_settings(
        worker_config(queue_name, threads=threads, poll_interval=poll_interval,
                      timeout=timeout, notify=not no_notify),
        queue_name, dsn=dsn, registry=registry,
    ))
    w.install_signal_handlers()
    sys.exit(w.run())


def worker_config(queue_name: str, *, notify: bool, **given: Any) -> Config:
    """The config a lone worker runs with: the options given, the models' defaults for the
    rest, and the models' limits checked (one line, exit 2, for a value out of range)."""
    try:
        queue = QueueConfig(**{name: value for name, value in given.items()
                               if value is not None})
    except ValidationError as exc:
        problem = exc.errors()[0]
        option = "--" + str(problem["loc"][0]).replace("_", "-")
        fail(f"{option}: {problem['msg']}", EXIT_USAGE)
    return Config(queues={queue_name: queue}, notify=notify)
