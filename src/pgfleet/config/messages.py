"""What the user reads when the file is wrong: one `FILE:LINE: key.path: expected` line per
problem, unknown keys with a "did you mean", and the exception that carries them all.

Every problem in a file is reported at once, so `pgfleet check` can be fixed in one pass
(``FILE:LINE:COL: ...`` when the YAML itself is malformed).
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

# A key path in the file: mapping keys and list indexes, e.g. ("queues", "default", "threads").
KeyPath = tuple[str | int, ...]
# (line, key path, message)
Problem = tuple[int, KeyPath, str]


class ConfigError(Exception):
    """The configuration file is unusable; `errors` lists every problem, one line each."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


def validation_problems(
    exc: ValidationError,
    root: type[BaseModel],
    lines: Mapping[KeyPath, int],
    explained: list[KeyPath],
) -> list[Problem]:
    """One problem per validation error of `root`, located by `lines`; paths in `explained`
    (and below them) were already reported by the loader and are skipped."""
    problems: list[Problem] = []
    for error in exc.errors():
        path = tuple(part for part in error["loc"] if part != "[key]")
        # The loader already explained this value (bad integer, missing variable).
        if any(path[: len(known)] == known for known in explained):
            continue
        problems.append((line_for(path, lines), path, _message(error, path, root)))
    return problems


def line_for(path: KeyPath, lines: Mapping[KeyPath, int]) -> int:
    # The deepest part of the path that exists in the file; a missing key gets its parent's.
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 1


_SIMPLE_MESSAGES = {
    "missing": "required key is missing",
    "int_parsing": "expected an integer",
    "int_type": "expected an integer",
    "int_from_float": "expected a whole number",
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "bool_parsing": "expected true or false",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "list_type": "expected a list",
    "finite_number": "expected a finite number",
}
_BOUND_MESSAGES = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "of at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "of at most"),
}


def _message(error: Any, path: KeyPath, root: type[BaseModel]) -> str:
    kind = str(error["type"])
    context = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return _unknown_key_message(path, root)
    if kind in _SIMPLE_MESSAGES:
        return _SIMPLE_MESSAGES[kind]
    if kind in _BOUND_MESSAGES:
        key, words = _BOUND_MESSAGES[kind]
        bound = context.get(key)
        # Show `1`, not `1.0`, for a float field whose bound is a whole number.
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"expected a value {words} {bound}"
    if kind == "too_short":
        return f"expected at least {context.get('min_length')} entries"
    if kind == "string_too_short":
        return "expected a non-empty string"
    if kind == "string_too_long":
        return f"expected at most {context.get('max_length')} characters"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


# Words other job systems use, mapped to pgfleet's field that means the same thing.
_SYNONYMS = {
    "concurrency": "threads",
    "workers": "processes",
    "retries": "max_attempts",
    "max_retries": "max_attempts",
    "schedule": "cron",
    "tz": "timezone",
    "dsn": "database_url",
}


def _likeness(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _unknown_key_message(path: KeyPath, root: type[BaseModel]) -> str:
    key = str(path[-1])
    fields = _field_names_at(root, path[:-1])
    message = f"unknown key `{key}`"
    close = difflib.get_close_matches(key, fields, n=1)
    synonym = difflib.get_close_matches(key, list(_SYNONYMS), n=1)
    if synonym and _SYNONYMS[synonym[0]] in fields and (
            not close or _likeness(key, synonym[0]) > _likeness(key, close[0])):
        # `concurency` is closer to the other systems' word than to key_concurrency.
        target = _SYNONYMS[synonym[0]]
        return f"{message}; did you mean `{target}`? (pgfleet's name for {synonym[0]})"
    if close:
        return f"{message}; did you mean `{close[0]}`?"
    if fields:
        return f"{message}; expected one of: {', '.join(fields)}"
    return message


def _field_names_at(root: type[BaseModel], path: KeyPath) -> list[str]:
    """Field names of the model that the data at `path` under `root` is validated against."""
    current: Any = root
    for part in path:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return []
            current = _unwrap(field.annotation)
        elif get_origin(current) in (dict, list):
            current = _unwrap(get_args(current)[-1])
        else:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    """Strip Optional and Annotated so the model or container type is left."""
    if get_origin(annotation) is Annotated:
        return _unwrap(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return _unwrap(members[0]) if len(members) == 1 else annotation
    return annotation


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dotted(path: KeyPath) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


# Shorter values are replaced only where a message quotes them, so that `1` from ${N}
# does not turn "at least 1" into "at least ${N}"; longer ones wherever they appear.
_ANYWHERE_FROM = 6
_QUOTES = "`'\""


def without_values(message: str, interpolated: Mapping[str, str]) -> str:
    """`message` with every value taken from the environment shown as `${NAME}`: a value
    may be a password, and problems reach terminals and the supervisor's log."""
    for name, value in sorted(interpolated.items(), key=lambda item: -len(item[1])):
        shown = f"${{{name}}}"
        # repr() is how a validator quoting the value with !r shows it.
        for form in dict.fromkeys((value, repr(value)[1:-1])):
            if not form.strip():
                continue
            if len(form) >= _ANYWHERE_FROM:
                message = message.replace(form, shown)
            else:
                for quote in _QUOTES:
                    message = message.replace(f"{quote}{form}{quote}",
                                              f"{quote}{shown}{quote}")
    return message


def format_problem(filename: str, line: int, path: KeyPath, message: str) -> str:
    """`FILE:LINE: key.path: message`, the one line a problem is shown as."""
    if not path:
        return f"{filename}:{line}: {message}"
    return f"{filename}:{line}: {dotted(path)}: {message}"
