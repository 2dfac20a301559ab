"""Field types of the configuration models: counts, durations, sizes, names, host:port.

Each type validates one value and says what was expected; relations between fields live
on the models.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from pgfleet.core.durations import parse_duration, parse_size
from pgfleet.core.flow import parse_rate

MiB = 1024 * 1024


def _not_bool(value: object) -> object:
    # pydantic's lax mode reads `processes: yes` as 1; a boolean is never a count.
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


def _positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("expected a duration greater than 0s")
    return seconds


_DURATION_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "pattern": r"^\s*(\d+(\.\d+)?(w|d|h|m|s|ms)?)+\s*$"},
    ],
    "examples": ["500ms", "30s", "5m", "1h30m", "7d"],
}
_SIZE_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([KkMmGgTt]i?[Bb]|[Bb])?\s*$"},
    ],
    "examples": ["512MiB", "1GiB", "100MB"],
}

Int = Annotated[int, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_not_bool)]
Duration = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(_DURATION_SCHEMA)]
PositiveDuration = Annotated[
    float, BeforeValidator(_positive_duration), WithJsonSchema(_DURATION_SCHEMA)
]
Size = Annotated[int, BeforeValidator(parse_size), WithJsonSchema(_SIZE_SCHEMA)]

MAX_PREFETCH = 1000


def _prefetch(value: object) -> int | Literal["auto"]:
    """One check for "a count or auto": as a union, pydantic reported one error per member,
    each under its internal name (`function-after[...]`, `literal['auto']`)."""
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_PREFETCH:
        return value
    raise ValueError(f"expected auto or a whole number from 0 to {MAX_PREFETCH}")


Prefetch = Annotated[
    int | Literal["auto"],
    PlainValidator(_prefetch),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_PREFETCH},
                              {"const": "auto"}]}),
]

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _check_module(name: str) -> str:
    if not _MODULE.fullmatch(name):
        raise ValueError(f"expected a dotted Python module name like myapp.tasks, got {name!r}")
    return name


def _check_name(name: str) -> str:
    if not 1 <= len(name) <= 128:
        raise ValueError("expected a name of 1 to 128 characters")
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        raise ValueError("a name must not contain control characters")
    if name[0].isspace():
        raise ValueError("a name must not start with whitespace")
    return name


def _check_callable(name: str) -> str:
    if not _MODULE.fullmatch(name) or "." not in name:
        raise ValueError(f"expected a dotted name module.callable like "
                         f"myapp.jobs.with_sentry, got {name!r}")
    return name


def _check_rate(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError('expected a rate in quotes like "100/s", "30/m" or "1000/h"')
    parse_rate(value)
    return value


_RATE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\s*\d+\s*/\s*\S+\s*$",
    "examples": ["100/s", "30/m", "1000/h", "5/10s"],
}

ModuleName = Annotated[str, AfterValidator(_check_module)]
CallableName = Annotated[str, AfterValidator(_check_callable)]
RateText = Annotated[str, BeforeValidator(_check_rate), WithJsonSchema(_RATE_SCHEMA)]
Name = Annotated[str, AfterValidator(_check_name)]


def relation_error(title: str, loc: tuple[str, ...], message: str, value: object) -> None:
    """Raise a ValidationError located at `loc`, so the line of that key is reported."""
    error = PydanticCustomError("relation", "{message}", {"message": message})
    details = InitErrorDetails(type=error, loc=loc, input=value)
    raise ValidationError.from_exception_data(title, [details])


FROZEN = ConfigDict(frozen=True, extra="forbid")


_HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def parse_listen(value: str) -> tuple[str, int]:
    """`host:port` (`[v6]:port`) as (host, port); ValueError saying what was expected."""
    hint = "expected host:port, e.g. 127.0.0.1:9464 or [::1]:9464"
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not (port_text.isascii() and port_text.isdigit()) \
            or len(port_text) > 5:
        raise ValueError(hint)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            raise ValueError(hint)
    elif ":" in host:
        raise ValueError(f"{hint} (IPv6 addresses go in brackets)")
    elif not _HOSTNAME.fullmatch(host):
        raise ValueError(hint)
    port = int(port_text)
    if port > 65535:
        raise ValueError("expected a port from 0 to 65535")
    return host, port
