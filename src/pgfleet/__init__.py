"""pgfleet: background jobs on PostgreSQL alone."""

# First of all, when this process is the `pgfleet` command, before the imports below
# (most of a start-up) run: a TERM or HUP is noted rather than ending the process
# (early_signals), and a URL given as --database-url leaves the command line.
import sys

from pgfleet.runtime import early_signals
from pgfleet.runtime.shown_argv import hide_database_url, is_this_the_command

if is_this_the_command():
    early_signals.keep()
    hide_database_url(sys.argv)

from pgfleet.client.async_enqueue import (
    enqueue_async,
    enqueue_job_async,
    enqueue_many_async,
)
from pgfleet.client.control import cancel, cancel_many, result
from pgfleet.client.enqueue import enqueue, enqueue_job, enqueue_many
from pgfleet.context import JobContext, current_job
from pgfleet.core.version import VERSION
from pgfleet.errors import (
    DatabaseUnavailable,
    JobCancelled,
    JobFailed,
    PayloadError,
    PgfleetError,
)
from pgfleet.sql.rows import Enqueued
from pgfleet.tasks import PermanentError, Retry, Snooze, task

__version__ = VERSION

__all__ = [
    "DatabaseUnavailable",
    "Enqueued",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "PayloadError",
    "PermanentError",
    "PgfleetError",
    "Retry",
    "Snooze",
    "__version__",
    "cancel",
    "cancel_many",
    "current_job",
    "enqueue",
    "enqueue_async",
    "enqueue_job",
    "enqueue_job_async",
    "enqueue_many",
    "enqueue_many_async",
    "result",
    "task",
]
