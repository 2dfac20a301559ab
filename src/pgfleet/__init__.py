"""pgfleet: background jobs on PostgreSQL alone."""

from pgfleet.client import enqueue, enqueue_job, enqueue_many
from pgfleet.context import JobContext, current_job
from pgfleet.errors import PayloadError, PgfleetError
from pgfleet.rows import Enqueued
from pgfleet.tasks import PermanentError, task

__version__ = "0.1.0"

__all__ = [
    "Enqueued",
    "JobContext",
    "PayloadError",
    "PermanentError",
    "PgfleetError",
    "__version__",
    "current_job",
    "enqueue",
    "enqueue_job",
    "enqueue_many",
    "task",
]
