"""`pgfleet worker`: one worker in the foreground, without a supervisor."""

from __future__ import annotations

import sys

import click
from setproctitle import setproctitle

from pgfleet.cli.common import EXIT_USAGE, chosen_dsn, fail, first_line, friendly, global_options


@click.command()
@click.option("--queue", "queue_name", required=True, help="The queue to work.")
@click.option("--tasks", "modules", required=True, multiple=True,
              help="Module whose @task functions may run (repeatable).")
@click.option("--threads", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--poll-interval", type=float, default=1.0, show_default=True,
              help="Seconds between polls.")
@click.option("--no-notify", is_flag=True, help="Poll only; do not LISTEN.")
@click.option("--timeout", type=float, default=1800.0, show_default=True,
              help="Seconds a job may run.")
@global_options
@friendly
def worker(queue_name: str, modules: tuple[str, ...], threads: int, poll_interval: float,
           no_notify: bool, timeout: float) -> None:
    """Run one worker process in the foreground (the supervisor forks these)."""
    # Imported here: the worker and the task registry are heavy, and only this command
    # needs them.
    from pgfleet.tasks import load_registry
    from pgfleet.worker import Worker, WorkerSettings

    sys.path.insert(0, "")
    for module in modules:
        try:
            load_registry([module])
        except Exception as exc:
            fail(f"--tasks {module}: cannot import it: {type(exc).__name__}: "
                 f"{first_line(exc)}", EXIT_USAGE)
    registry = load_registry(modules)
    # The name `ps` shows, and the application_name of this worker's connections.
    setproctitle(f"pgfleet worker {queue_name}")
    w = Worker(WorkerSettings(
        dsn=chosen_dsn(), queue=queue_name, registry=registry, threads=threads,
        poll_interval=poll_interval, notify=not no_notify, timeout=timeout,
    ))
    w.install_signal_handlers()
    sys.exit(w.run())
