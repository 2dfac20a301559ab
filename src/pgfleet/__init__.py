"""pgfleet: background jobs on PostgreSQL alone."""

from pgfleet.client import enqueue, enqueue_job, enqueue_many
from pgfleet.context import JobContext, current_job
from pgfleet.control import cancel, cancel_many, result
from pgfleet.errors import JobCancelled, JobFailed, PayloadError, PgfleetError
from pgfleet.rows import Enqueued
from pgfleet.tasks import PermanentError, Retry, Snooze, task

__version__ = "0.1.0"

__all__ = [
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
    "enqueue_job",
    "enqueue_many",
    "result",
    "task",
]
