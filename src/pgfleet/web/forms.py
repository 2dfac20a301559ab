"""Checking what a request says (query strings and form fields) before it reaches the
database: a mistake is a 400 naming the field, never a database error or a 500."""

from __future__ import annotations

from pgfleet.web.lists import BIGINT_MAX

# Longer than any bigint: int() of a 5,000-digit string raises, and is never an id anyway.
MAX_DIGITS = 19
# Names are at most this long (the table's checks); a search longer than this is a paste
# gone wrong, and each character costs an ILIKE over every row of a window.
NAME_LIMIT = 255
SEARCH_LIMIT = 1000


class BadInput(Exception):
    """A field of the request is malformed; the text names it and says what is expected."""


def whole_number(value: str | None, name: str) -> int | None:
    """A positive bigint, or None when the field is empty or absent."""
    if not value:
        return None
    # isdigit() alone takes "²" and other digits int() refuses.
    if (not value.isascii() or not value.isdigit() or len(value) > MAX_DIGITS
            or not 0 < int(value) <= BIGINT_MAX):
        raise BadInput(f"{name} must be a positive whole number")
    return int(value)


def name(value: str | None, field: str) -> str | None:
    """A queue or task name to filter on (None when empty). NUL is refused: no PostgreSQL
    text holds it. Other control characters are looked for like any character: the SQL
    enqueue accepts them, and the overview links to such a queue's jobs."""
    if not value:
        return None
    if len(value) > NAME_LIMIT:
        raise BadInput(f"{field} must be at most {NAME_LIMIT} characters")
    if "\x00" in value:
        raise BadInput(f"{field} must not contain a NUL character")
    return value


def search(value: str | None) -> str | None:
    """The text search; a tab or line break may be looked for, NUL cannot be stored."""
    if not value:
        return None
    if len(value) > SEARCH_LIMIT:
        raise BadInput(f"q must be at most {SEARCH_LIMIT} characters")
    if "\x00" in value:
        raise BadInput("q must not contain a NUL character")
    return value


def choice(value: str | None, allowed: tuple[str, ...], field: str) -> str | None:
    if not value:
        return None
    if value not in allowed:
        raise BadInput(f"{field} must be one of {', '.join(allowed)}")
    return value
