"""The `pgfleet` command group: its global options, its commands, and the entry point."""

from __future__ import annotations

import sys

import click

from pgfleet import __version__
from pgfleet.cli.check import check, config_schema
from pgfleet.cli.common import EXIT_USAGE, fail, global_options
from pgfleet.cli.cron import cron
from pgfleet.cli.dev import dev
from pgfleet.cli.enqueue import enqueue
from pgfleet.cli.grants import grants
from pgfleet.cli.jobs import jobs
from pgfleet.cli.migrate import migrate
from pgfleet.cli.queues import queues
from pgfleet.cli.run import run
from pgfleet.cli.status import status
from pgfleet.cli.web import web
from pgfleet.cli.worker import worker
from pgfleet.runtime import early_signals, logs
from pgfleet.runtime.shown_argv import hide_database_url


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pgfleet")
@global_options
@click.option("--log-format", type=click.Choice(["plain", "json"]), default="plain",
              show_default=True, help="Log line format.")
@click.pass_context
def cli(ctx: click.Context, log_format: str) -> None:
    """pgfleet: background jobs on PostgreSQL alone."""
    if ctx.invoked_subcommand != "run":
        # Only the supervisor acts on a signal that came while pgfleet was imported
        # (cli.run.supervise takes it); any other command ends as usual.
        early_signals.release()
    logs.setup(log_format)
    ctx.ensure_object(dict)["log_format"] = log_format


for _command in (migrate, enqueue, worker, jobs, queues, check, config_schema, run, status,
                 cron, dev, web, grants):
    cli.add_command(_command)


def main() -> None:
    """Console entry point: click's usage errors become one line and exit status 2."""
    hide_database_url(sys.argv)
    try:
        _dispatch()
    finally:
        early_signals.release()  # --help, --version, a usage error: nothing took them
    sys.exit(0)


def _dispatch() -> None:
    """Run the command; click's exceptions become one line and an exit status."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        where = f" ({ctx.command_path})" if ctx is not None else ""
        fail(f"{exc.format_message()}{where}", EXIT_USAGE)
    except SystemExit:
        raise
