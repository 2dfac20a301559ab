"""Text from the database made safe to print: names, errors and arguments are chosen by
whoever can enqueue, and a terminal obeys the escape sequences it receives (colours, a
moved cursor, a rewritten title, hidden lines, reversed text)."""

from __future__ import annotations

import re
from typing import Any

# C0 and C1 controls (newline included: a name must not forge a line of output), DEL,
# and the invisible or direction-changing format characters.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def escape_controls(text: str) -> str:
    """`text` with each control character written as its Python escape (\\x1b, \\u202e)."""
    return _CONTROL.sub(lambda match: match[0].encode("unicode_escape").decode("ascii"), text)


def shown(data: Any) -> Any:
    """`data` with every string in it, keys included, passed through escape_controls."""
    if isinstance(data, str):
        return escape_controls(data)
    if isinstance(data, dict):
        return {shown(key): shown(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(shown(item) for item in data)
    return data
