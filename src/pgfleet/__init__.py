"""pgfleet: background jobs on PostgreSQL alone."""

from pgfleet.client import enqueue, enqueue_many
from pgfleet.errors import PayloadError, PgfleetError
from pgfleet.tasks import task

__version__ = "0.1.0"

__all__ = ["PayloadError", "PgfleetError", "__version__", "enqueue", "enqueue_many", "task"]
