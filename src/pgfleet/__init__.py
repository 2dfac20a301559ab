"""pgfleet: background jobs on PostgreSQL alone."""

# First of all, when this process is the `pgfleet` command: a URL given as --database-url
# leaves the command line before the imports below (most of a start-up) run.
from pgfleet.shown_argv import hide_in_command

hide_in_command()

from pgfleet.async_client import (  # noqa: E402
    enqueue_async,
    enqueue_job_async,
    enqueue_many_async,
)
from pgfleet.client import enqueue, enqueue_job, enqueue_many  # noqa: E402
from pgfleet.context import JobContext, current_job  # noqa: E402
from pgfleet.control import cancel, cancel_many, result  # noqa: E402
from pgfleet.errors import (  # noqa: E402
    DatabaseUnavailable,
    JobCancelled,
    JobFailed,
    PayloadError,
    PgfleetError,
)
from pgfleet.rows import Enqueued  # noqa: E402
from pgfleet.tasks import PermanentError, Retry, Snooze, task  # noqa: E402

__version__ = "0.1.0"

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
