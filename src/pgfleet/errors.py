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
