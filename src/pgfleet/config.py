"""The YAML configuration file: safe loading, `${VAR}` interpolation, validation, schema.

Every problem in a file is reported at once, one line each, as
``FILE:LINE: key.path: what was expected`` (``FILE:LINE:COL: ...`` when the YAML itself is
malformed), so `pgfleet check` can be fixed in one pass.

YAML rules pgfleet applies on top of PyYAML's safe loader:

* Mapping keys are always the text as written: a queue named ``no``, ``on`` or ``off``
  stays that string (YAML 1.1 would turn it into a boolean). Duplicate keys are errors.
* Only plain data: tags such as ``!!python/object/apply`` are refused, nothing is built.
* Integers must be plain decimal. ``010`` (octal 8 in YAML 1.1), ``0x10``, ``0b1`` and
  base-60 ``1:30`` are errors instead of silently becoming other numbers. ``1e3`` is not a
  number in YAML 1.1 (PyYAML needs ``1.0e+3``), so an integer or duration field given it
  reports the usual "expected ..." error. Dates stay strings.
* Size and alias caps (1 MiB, 100 aliases, 100,000 values after alias expansion, 50
  levels of nesting) refuse billion-laughs documents before they use memory.

Interpolation happens after parsing, on string values only, so an injected value stays
one literal string whatever it contains. ``${VAR}`` and ``${VAR:-default}`` (the default
also replaces an empty value) are expanded once, never recursively; ``$${`` writes a
literal ``${``. Numeric fields accept interpolated digits: ``processes: ${N:-2}`` is 2,
and an interpolated ``010`` is decimal 10.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from pgfleet.cron import CronError, validate_cron, validate_timezone
from pgfleet.durations import format_duration, parse_duration, parse_size

MAX_FILE_BYTES = 1024 * 1024
MAX_ALIASES = 100
MAX_VALUES = 100_000
MAX_DEPTH = 50
MiB = 1024 * 1024


class ConfigError(Exception):
    """The configuration file is unusable; `errors` lists every problem, one line each."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


# ------------------------------------------------------------------------ secrets


_URL_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^:/@?#]*:)(.*)@", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)


def redact_dsn(dsn: str) -> str:
    """Return `dsn` with any password replaced by ``***`` (URL and key=value forms)."""
    # Greedy up to the last "@": an unescaped "@" in a password must not leak its tail.
    redacted = _URL_PASSWORD.sub(r"\1***@", dsn)
    return _KEYWORD_PASSWORD.sub(r"\1***", redacted)


# ------------------------------------------------------------------ field types


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


ModuleName = Annotated[str, AfterValidator(_check_module)]
Name = Annotated[str, AfterValidator(_check_name)]


def _relation_error(title: str, loc: tuple[str, ...], message: str, value: object) -> None:
    """Raise a ValidationError located at `loc`, so the line of that key is reported."""
    error = PydanticCustomError("relation", "{message}", {"message": message})
    details = InitErrorDetails(type=error, loc=loc, input=value)
    raise ValidationError.from_exception_data(title, [details])


_FROZEN = ConfigDict(frozen=True, extra="forbid")


# ------------------------------------------------------------------------ models


def _check_max_not_below_initial(title: str, initial: float, maximum: float) -> None:
    if maximum < initial:
        _relation_error(
            title,
            ("max",),
            f"max ({format_duration(maximum)}) must be at least initial "
            f"({format_duration(initial)})",
            maximum,
        )


class Backoff(BaseModel):
    """Delay before retrying a failed job: initial * factor**(attempt-1), capped, jittered."""

    model_config = _FROZEN

    initial: PositiveDuration = Field(default=1.0, description="Delay before the first retry.")
    max: PositiveDuration = Field(default=3600.0, description="Upper bound of any retry delay.")
    factor: Float = Field(default=2.0, ge=1, le=100, description="Growth of the delay per attempt.")
    jitter: Float = Field(
        default=0.2, ge=0, le=1, description="Random spread as a fraction of the delay (0 to 1)."
    )

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> Backoff:
        _check_max_not_below_initial("Backoff", self.initial, self.max)
        return self


class RestartBackoff(BaseModel):
    """Delay before restarting a worker that died, doubling per failure up to `max`."""

    model_config = _FROZEN

    initial: PositiveDuration = Field(default=0.5, description="Delay after the first failure.")
    max: PositiveDuration = Field(default=30.0, description="Upper bound of the restart delay.")

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> RestartBackoff:
        _check_max_not_below_initial("RestartBackoff", self.initial, self.max)
        return self


class QueueConfig(BaseModel):
    """One queue: how many worker processes and threads run it, and its job policy."""

    model_config = _FROZEN

    processes: Int = Field(default=1, ge=1, le=64, description="Worker processes for this queue.")
    threads: Int = Field(default=1, ge=1, le=256, description="Jobs run at once by each process.")
    timeout: PositiveDuration = Field(
        default=1800.0, description="A job running longer is stopped and failed (at most 7d)."
    )
    kill_grace: Duration = Field(
        default=10.0, description="Time between SIGTERM and SIGKILL when a worker must be stopped."
    )
    max_attempts: Int = Field(
        default=20, ge=1, le=1000, description="Attempts before a job is dead."
    )
    backoff: Backoff = Field(default=Backoff(), description="Retry delay policy.")
    max_jobs: Int | None = Field(
        default=None, ge=1, description="Recycle a worker process after this many jobs."
    )
    max_memory: Size | None = Field(
        default=None, description="Recycle a worker process above this RSS (at least 32MiB)."
    )
    poll_interval: PositiveDuration | None = Field(
        default=None, description="Polling period of this queue; defaults to the top-level one."
    )
    prefetch: Int = Field(default=0, ge=0, le=1000, description="Jobs claimed beyond free slots.")
    tasks: list[ModuleName] = Field(
        default_factory=list, description="Extra task modules only this queue imports."
    )

    @field_validator("timeout")
    @classmethod
    def _timeout_at_most_a_week(cls, value: float) -> float:
        if value > 7 * 86400:
            raise ValueError("expected a duration of at most 7d")
        return value

    @field_validator("max_memory")
    @classmethod
    def _memory_floor(cls, value: int | None) -> int | None:
        # Below this a Python worker with psycopg loaded would recycle after every job.
        if value is not None and value < 32 * MiB:
            raise ValueError("expected a size of at least 32MiB")
        return value


class Schedule(BaseModel):
    """A cron entry: at each fire time one job is enqueued, once across all hosts."""

    model_config = _FROZEN

    cron: str = Field(
        description="Five fields (minute hour day month weekday), six with seconds first, "
        "or an alias like @daily."
    )
    timezone: str = Field(default="UTC", description="IANA time zone the cron fields are read in.")
    task: str = Field(min_length=1, max_length=255, description="Registered task name.")
    args: dict[str, Any] = Field(default_factory=dict, description="JSON arguments.")
    queue: Name = Field(default="default", description="Queue the job goes to.")
    priority: Int = Field(default=0, ge=-1000, le=1000, description="Lower runs first.")
    enabled: bool = Field(default=True, description="A disabled schedule enqueues nothing.")
    max_delay: PositiveDuration = Field(
        default=3600.0, description="How late a missed fire (e.g. after downtime) may still run."
    )

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        try:
            validate_cron(value)
        except CronError as exc:
            shown = value if len(value) <= 60 else value[:60] + "..."
            raise ValueError(f'invalid cron expression "{shown}": {exc}') from exc
        return value

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        validate_timezone(value)
        return value

    @field_validator("args")
    @classmethod
    def _json_args(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError("expected JSON-compatible arguments (no NaN or Infinity)") from exc
        return value


class Metrics(BaseModel):
    """The Prometheus exporter of this host."""

    model_config = _FROZEN

    enabled: bool = Field(default=True, description="Serve /metrics, /livez and /readyz.")
    listen: str = Field(
        default="127.0.0.1:9464", description="host:port to bind; [::1]:9464 for IPv6."
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        parse_listen(value)
        return value


_HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def parse_listen(value: str) -> tuple[str, int]:
    hint = "expected host:port, e.g. 127.0.0.1:9464 or [::1]:9464"
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or len(port_text) > 5:
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


class Supervisor(BaseModel):
    """Liveness and restart policy of the per-host supervisor."""

    model_config = _FROZEN

    heartbeat_interval: PositiveDuration = Field(
        default=5.0, description="Worker heartbeat period."
    )
    stale_after: PositiveDuration = Field(
        default=30.0, description="A worker without a heartbeat this long is killed and replaced."
    )
    shutdown_timeout: PositiveDuration = Field(
        default=30.0, description="On SIGTERM, time running jobs get to finish."
    )
    lease: PositiveDuration = Field(
        default=60.0,
        description="How long a claim holds without renewal before another host "
        "may rescue the job.",
    )
    restart_backoff: RestartBackoff = Field(
        default=RestartBackoff(), description="Delay between worker restarts."
    )
    max_start_failures: Int = Field(
        default=5, ge=1, le=1000, description="Start-up failures in a row before a queue is failed."
    )

    @model_validator(mode="after")
    def _heartbeat_fits(self) -> Supervisor:
        # Two missed heartbeats, not one delayed write, should make a worker stale.
        if self.heartbeat_interval >= self.stale_after / 2:
            _relation_error(
                "Supervisor",
                ("heartbeat_interval",),
                f"heartbeat_interval ({format_duration(self.heartbeat_interval)}) must be "
                f"less than half of stale_after ({format_duration(self.stale_after)})",
                self.heartbeat_interval,
            )
        return self


class Maintenance(BaseModel):
    """Rescue of dead workers' jobs, pruning of finished jobs, queue gauges."""

    model_config = _FROZEN

    interval: PositiveDuration = Field(default=1.0, description="Period of the maintenance pass.")
    retention: PositiveDuration = Field(
        default=7 * 86400.0, description="Finished jobs older than this are deleted."
    )
    prune_batch: Int = Field(
        default=10000, ge=1, le=1_000_000, description="Rows deleted per batch."
    )


class Config(BaseModel):
    """The whole pgfleet.yaml file."""

    model_config = _FROZEN

    # repr=False: the URL may carry a password and configs end up in logs.
    database_url: str | None = Field(
        default=None,
        repr=False,
        description="PostgreSQL URL or key=value DSN. When absent the command line uses "
        "--database-url, PGFLEET_DATABASE_URL or DATABASE_URL.",
    )
    tasks: list[ModuleName] = Field(
        default_factory=list, description="Modules whose @task functions workers may run."
    )
    notify: bool = Field(
        default=True, description="Wake workers with LISTEN/NOTIFY (polling stays)."
    )
    poll_interval: PositiveDuration = Field(default=1.0, description="How often idle workers poll.")
    queues: dict[Name, QueueConfig] = Field(
        min_length=1, description="Queues this host runs, by name."
    )
    schedules: dict[Name, Schedule] = Field(
        default_factory=dict, description="Cron entries, by name."
    )
    metrics: Metrics = Field(default=Metrics(), description="Prometheus exporter.")
    supervisor: Supervisor = Field(default=Supervisor(), description="Supervisor.")
    maintenance: Maintenance = Field(default=Maintenance(), description="Maintenance pass.")

    @field_validator("database_url", mode="before")
    @classmethod
    def _empty_url_is_absent(cls, value: object) -> object:
        # `${DATABASE_URL:-}` should mean "fall back to the command line", not "connect to ''".
        return None if value == "" else value

    @model_validator(mode="after")
    def _lease_outlives_kill(self) -> Config:
        # The supervisor kills a stuck worker after stale_after, then waits kill_grace for
        # SIGKILL; only then is the job's process certainly gone. If the lease ran out
        # first, another host could rescue and run the job while the first run is alive.
        grace, queue = max((q.kill_grace, name) for name, q in self.queues.items())
        needed = self.supervisor.stale_after + grace
        if self.supervisor.lease <= needed:
            _relation_error(
                "Config",
                ("supervisor", "lease"),
                f"lease ({format_duration(self.supervisor.lease)}) must be greater than "
                f"stale_after ({format_duration(self.supervisor.stale_after)}) + kill_grace "
                f"of queue `{queue}` ({format_duration(grace)}) = {format_duration(needed)}: "
                "the supervisor must kill a stuck worker before its jobs' lease can expire",
                self.supervisor.lease,
            )
        return self

    # Where each key path stood in the file, for errors found after validation
    # (a task module that does not exist, a schedule naming an unregistered task).
    _source: str = PrivateAttr(default="<config>")
    _lines: dict[KeyPath, int] = PrivateAttr(default_factory=dict)

    def where(self, *path: str | int) -> str:
        """`FILE:LINE: key.path` for a key path of this config."""
        return f"{self._source}:{_line_for(tuple(path), self._lines)}: {_dotted(tuple(path))}"

    def queue_poll_interval(self, name: str) -> float:
        """The polling period of queue `name`, falling back to the top-level one."""
        own = self.queues[name].poll_interval
        return self.poll_interval if own is None else own

    def task_modules(self, name: str) -> list[str]:
        """Task modules a worker of queue `name` imports: global ones, then its own."""
        return list(dict.fromkeys([*self.tasks, *self.queues[name].tasks]))


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of the configuration file (`pgfleet config-schema`)."""
    schema = Config.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pgfleet configuration"
    return schema


# ------------------------------------------------------------------------ loading


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate the file at `path`; raise ConfigError on any problem."""
    filename = str(path)
    try:
        with open(path, "rb") as handle:
            # Read one byte past the cap so a huge file is refused without reading it all.
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError([f"{filename}: cannot read the file: {exc.strerror}"]) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError([_too_big(filename)])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError([f"{filename}:{line}: the file is not valid UTF-8"]) from None
    return parse_config_text(text, filename, environ)


def parse_config_text(
    text: str, filename: str = "<config>", environ: Mapping[str, str] | None = None
) -> Config:
    """Validate configuration `text` as if read from `filename`; raise ConfigError."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise ConfigError([_too_big(filename)])
    root = _compose(text, filename)
    if root is None:
        raise ConfigError(
            [f"{filename}:1: the file is empty; expected a mapping with at least `queues`"]
        )
    if not isinstance(root, MappingNode):
        line = root.start_mark.line + 1
        raise ConfigError(
            [f"{filename}:{line}: expected a mapping at the top level (with at least `queues`)"]
        )
    builder = _Builder(os.environ if environ is None else environ)
    try:
        data = builder.build(root, (), 0)
    except _Refused as exc:
        raise ConfigError([f"{filename}:{exc.line}: {exc}"]) from None
    except yaml.MarkedYAMLError as exc:  # e.g. a `<<` merge of something not a mapping
        raise ConfigError([_yaml_problem(filename, exc)]) from None
    problems = list(builder.problems)
    config: Config | None = None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        problems.extend(_validation_problems(exc, builder))
    if problems:
        problems.sort(key=lambda problem: problem[0])
        raise ConfigError([_format(filename, *problem) for problem in problems])
    assert config is not None
    config._source = filename
    config._lines = dict(builder.lines)
    return config


def _too_big(filename: str) -> str:
    return f"{filename}:1: the file is larger than 1 MiB; refusing to parse it"


class _Refused(Exception):
    """A document refused as a whole (alias bomb, too deep); carries the line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class _Loader(yaml.SafeLoader):
    """SafeLoader that counts aliases and leaves dates as strings."""

    # Dates would make `args` non-JSON; everything date-like stays text.
    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_count = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                raise _Refused(line, f"more than {MAX_ALIASES} aliases; refusing the document")
        return super().compose_node(parent, index)


def _compose(text: str, filename: str) -> Node | None:
    loader = _Loader(text)
    try:
        return loader.get_single_node()
    except _Refused as exc:
        raise ConfigError([f"{filename}:{exc.line}: {exc}"]) from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_yaml_problem(filename, exc)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{filename}:1: {exc}"]) from None
    except RecursionError:
        raise ConfigError([f"{filename}:1: the document is nested too deeply"]) from None
    finally:
        loader.dispose()


def _yaml_problem(filename: str, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{mark.line + 1}:{mark.column + 1}" if mark else "1"
    problem = exc.problem or exc.context or "malformed YAML"
    if "alias" in problem or (exc.context and "alias" in exc.context):
        # The classic trap: `cron: * * * * *` reads as an alias.
        problem += ' (a value starting with `*` must be quoted, e.g. "* * * * *")'
    elif "\\t" in problem or "tab" in problem:
        problem += " (indent with spaces, not tabs)"
    return f"{filename}:{where}: {problem}"


KeyPath = tuple[str | int, ...]
_Problem = tuple[int, KeyPath, str]

_PLAIN_TAGS = {
    "tag:yaml.org,2002:" + name for name in ("str", "int", "float", "bool", "null", "map", "seq")
}
_MERGE_TAG = "tag:yaml.org,2002:merge"
_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")
_PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9_]*)")
_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")


class _Builder:
    """Turns composed YAML nodes into plain data, recording the line of every key path."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.lines: dict[KeyPath, int] = {}
        self.problems: list[_Problem] = []
        self.values = 0
        self.constructor = yaml.SafeLoader("")

    def problem(self, line: int, path: KeyPath, message: str) -> None:
        self.problems.append((line, path, message))

    def build(self, node: Node, path: KeyPath, depth: int) -> Any:
        self.values += 1
        line = node.start_mark.line + 1
        if self.values > MAX_VALUES:
            raise _Refused(
                line,
                f"the document expands to more than {MAX_VALUES} values "
                "through aliases; refusing it",
            )
        if depth > MAX_DEPTH:
            raise _Refused(
                line, f"nested more than {MAX_DEPTH} levels deep (or an alias refers to itself)"
            )
        self.lines.setdefault(path, line)
        if node.tag not in _PLAIN_TAGS:
            # Refuse rather than construct: a Python tag must never reach a constructor.
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            self.problem(line, path, f"tag `{tag}` is not allowed; only plain data is")
            return None
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        assert isinstance(node, ScalarNode)
        return self._scalar(node, path)

    def _mapping(self, node: MappingNode, path: KeyPath, depth: int) -> dict[str, Any]:
        self._check_duplicates(node, path)
        self.constructor.flatten_mapping(node)  # resolves `<<: *base` merges in place
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                self.problem(key_node.start_mark.line + 1, path, "mapping keys must be text")
                continue
            # The key as written: YAML 1.1 would read a queue named `no` as False.
            key = str(key_node.value)
            child = (*path, key)
            self.lines[child] = key_node.start_mark.line + 1
            result[key] = self.build(value_node, child, depth + 1)
        return result

    def _check_duplicates(self, node: MappingNode, path: KeyPath) -> None:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            line = key_node.start_mark.line + 1
            key = str(key_node.value)
            if key in seen:
                self.problem(
                    line,
                    (*path, key),
                    f"duplicate key `{key}` (first on line {seen[key]}, again on line {line})",
                )
            else:
                seen[key] = line

    def _scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        line = node.start_mark.line + 1
        self.lines[path] = line
        raw = str(node.value)
        if node.style is None and _ambiguous_int(raw, node.tag):
            self.problem(line, path, _int_message(raw, node))
            return raw
        try:
            value = self.constructor.construct_object(node)
        except (ValueError, KeyError, yaml.YAMLError):
            # Only explicit tags get here, e.g. `!!int abc` or `!!bool maybe`.
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            self.problem(line, path, f"`{raw}` is not a valid `{tag}`")
            return raw
        if isinstance(value, str):
            return self._interpolate(value, line, path)
        return value

    def _interpolate(self, text: str, line: int, path: KeyPath) -> str:
        if "${" not in text:
            return text

        def replace(match: re.Match[str]) -> str:
            whole, name, default = match.group(0), match.group(1), match.group(2)
            if whole == "$${":
                return "${"
            if name is None:
                self.problem(
                    line,
                    path,
                    "malformed `${`: expected ${NAME} or "
                    "${NAME:-default}; write $${ for a literal ${",
                )
                return whole
            value = self.environ.get(name)
            if default is not None and not value:
                return default
            if value is None:
                self.problem(
                    line, path, f"environment variable `{name}` is not set and has no default"
                )
                return ""
            return value

        # re.sub never rescans replaced text, so a value holding ${OTHER} stays literal.
        return _REFERENCE.sub(replace, text)


def _ambiguous_int(raw: str, tag: str) -> bool:
    if _LEADING_ZERO.fullmatch(raw):
        return True
    return tag == "tag:yaml.org,2002:int" and not _PLAIN_INT.fullmatch(raw)


def _int_message(raw: str, node: ScalarNode) -> str:
    advice = "write integers in plain decimal, without leading zeros (quote text)"
    if node.tag != "tag:yaml.org,2002:int":
        return f"`{raw}` has a leading zero, which YAML 1.1 does not read as decimal; {advice}"
    text = raw.lower().lstrip("+-")
    if ":" in text:
        kind = "base 60"
    elif text.startswith("0x"):
        kind = "hexadecimal"
    elif text.startswith("0b"):
        kind = "binary"
    else:
        kind = "octal"
    try:
        value = yaml.SafeLoader("").construct_yaml_int(node)
    except ValueError:
        return f"`{raw}` is not a plain decimal integer; {advice}"
    return f"YAML 1.1 reads `{raw}` as {kind}, i.e. {value}; {advice}"


# ------------------------------------------------------------- validation errors


def _validation_problems(exc: ValidationError, builder: _Builder) -> list[_Problem]:
    reported = [path for _, path, _ in builder.problems]
    problems: list[_Problem] = []
    for error in exc.errors():
        path = tuple(part for part in error["loc"] if part != "[key]")
        # The loader already explained this value (bad integer, missing variable).
        if any(path[: len(known)] == known for known in reported):
            continue
        line = _line_for(path, builder.lines)
        problems.append((line, path, _message(error, path)))
    return problems


def _line_for(path: KeyPath, lines: Mapping[KeyPath, int]) -> int:
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


def _message(error: Any, path: KeyPath) -> str:
    kind = str(error["type"])
    context = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return _unknown_key_message(path)
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


def _unknown_key_message(path: KeyPath) -> str:
    key = str(path[-1])
    fields = _field_names_at(path[:-1])
    message = f"unknown key `{key}`"
    close = difflib.get_close_matches(key, fields, n=1)
    if close:
        return f"{message}; did you mean `{close[0]}`?"
    synonym = difflib.get_close_matches(key, list(_SYNONYMS), n=1)
    if synonym and _SYNONYMS[synonym[0]] in fields:
        target = _SYNONYMS[synonym[0]]
        return f"{message}; did you mean `{target}`? (pgfleet's name for {synonym[0]})"
    if fields:
        return f"{message}; expected one of: {', '.join(fields)}"
    return message


def _field_names_at(path: KeyPath) -> list[str]:
    """Field names of the model that the data at `path` is validated against."""
    current: Any = Config
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


def _dotted(path: KeyPath) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


def _format(filename: str, line: int, path: KeyPath, message: str) -> str:
    if not path:
        return f"{filename}:{line}: {message}"
    return f"{filename}:{line}: {_dotted(path)}: {message}"


__all__ = [
    "Backoff",
    "Config",
    "ConfigError",
    "Maintenance",
    "Metrics",
    "QueueConfig",
    "RestartBackoff",
    "Schedule",
    "Supervisor",
    "config_json_schema",
    "load_config",
    "parse_config_text",
    "redact_dsn",
]
