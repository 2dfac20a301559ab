"""Text from the database made safe to show: names, errors and arguments are chosen by
whoever can enqueue, and a terminal obeys the escape sequences it receives (colours, a
moved cursor, a rewritten title, hidden lines, reversed text), while a browser draws
invisible, look-alike and direction-changing characters as they ask. The CLI and the web
UI both write such characters through `escape_controls`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# Only characters outside printable ASCII can be hidden ones; the check runs on those.
_CANDIDATES = re.compile(r"[^\x20-\x7e]")
# Printable to Python but drawn as nothing: fillers that make two names look alike.
_BLANK_LETTERS = frozenset("\u115f\u1160\u2800\u3164\uffa0")


def hidden(char: str) -> bool:
    """Is `char` one a reader could not see for what it is? Controls (C0 and C1, newline
    included: a name must not forge a line of output; DEL), format characters (zero-width,
    bidi overrides and isolates, U+FEFF, soft hyphen, tags), line and paragraph separators,
    spaces other than U+0020 (a no-break space looks like a space), unassigned and
    private-use code points - Python's `not str.isprintable()` - and blank letters."""
    return not char.isprintable() or char in _BLANK_LETTERS


def escape_controls(text: str, mark: Callable[[str], str] = str, keep: str = "") -> str:
    """`text` with each hidden character written as its Python escape (\\x1b, \\u202e,
    \\U000e0041), passed through `mark` (the web UI wraps it in a styled element).
    Characters in `keep` stay as they are: the line breaks of a block of text."""
    def replace(match: re.Match[str]) -> str:
        char = match[0]
        if char in keep or not hidden(char):
            return char
        return mark(char.encode("unicode_escape").decode("ascii"))
    return _CANDIDATES.sub(replace, text)


def has_hidden(text: str) -> bool:
    return any(hidden(char) for char in _CANDIDATES.findall(text))


def shown(data: Any) -> Any:
    """`data` with every string in it, keys included, passed through escape_controls."""
    if isinstance(data, str):
        return escape_controls(data)
    if isinstance(data, dict):
        return {shown(key): shown(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(shown(item) for item in data)
    return data
