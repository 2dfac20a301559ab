"""Exceptions that carry a message meant for the person at the terminal."""


class PgfleetError(Exception):
    """Base of every error pgfleet raises on purpose; its text is one line for people."""


class PayloadError(PgfleetError, ValueError):
    """An enqueue argument was refused before anything was written."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class DatabaseUnavailable(PgfleetError):
    """The database could not be reached; the message never holds a password."""


class JobFailed(PgfleetError):
    """pgfleet.result: the job is dead (its attempts spent, or a permanent error)."""

    def __init__(self, job_id: int, error: str | None) -> None:
        first = (error or "no error recorded").strip().splitlines()
        super().__init__(f"job {job_id} is dead: {first[0] if first else error}")
        self.job_id = job_id
        self.error = error  # the job's last error, in full


class JobCancelled(PgfleetError):
    """pgfleet.result: the job was cancelled."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} was cancelled")
        self.job_id = job_id
