"""pgfleet: background jobs on PostgreSQL alone."""

from pgfleet.async_client import enqueue_async, enqueue_job_async, enqueue_many_async
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
    "enqueue_async",
    "enqueue_job",
    "enqueue_job_async",
    "enqueue_many",
    "enqueue_many_async",
    "task",
]
