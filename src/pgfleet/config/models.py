"""The configuration models: what each key of pgfleet.yaml means, its default, and the
relations between keys that must hold. Their field defaults are pgfleet's defaults."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from pgfleet.config.fields import (
    FROZEN,
    CallableName,
    Duration,
    Float,
    Int,
    MiB,
    ModuleName,
    Name,
    PositiveDuration,
    Prefetch,
    RateText,
    Size,
    parse_listen,
    relation_error,
)
from pgfleet.config.messages import KeyPath, dotted, line_for, without_values
from pgfleet.core.backoff import Backoff
from pgfleet.core.crontab import CronError, validate_cron, validate_timezone
from pgfleet.core.durations import format_duration
from pgfleet.core.flow import MAX_CONCURRENCY, FlowLimits, parse_rate


def _check_max_not_below_initial(title: str, initial: float, maximum: float) -> None:
    if maximum < initial:
        relation_error(
            title,
            ("max",),
            f"max ({format_duration(maximum)}) must be at least initial "
            f"({format_duration(initial)})",
            maximum,
        )


# The retry policy's defaults are the runtime type's, so task-level overrides
# (`@task(backoff={"initial": 5})`) and the file fill the gaps the same way.
_RETRY = Backoff()


class BackoffConfig(BaseModel):
    """Delay before retrying a failed job: initial * factor**(attempt-1), capped, jittered."""

    model_config = FROZEN

    initial: PositiveDuration = Field(
        default=_RETRY.initial, description="Delay before the first retry."
    )
    max: PositiveDuration = Field(
        default=_RETRY.max, description="Upper bound of any retry delay."
    )
    factor: Float = Field(
        default=_RETRY.factor, ge=1, le=100, description="Growth of the delay per attempt."
    )
    jitter: Float = Field(
        default=_RETRY.jitter,
        ge=0,
        le=1,
        description="Random spread as a fraction of the delay (0 to 1).",
    )

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> BackoffConfig:
        _check_max_not_below_initial("BackoffConfig", self.initial, self.max)
        return self

    def to_backoff(self) -> Backoff:
        """The runtime policy (`delay(attempt)`) this configuration describes."""
        return Backoff(initial=self.initial, max=self.max, factor=self.factor, jitter=self.jitter)


class RestartBackoffConfig(BackoffConfig):
    """Delay before restarting a worker that died: the same policy, with restart defaults
    (doubling from 0.5s up to 30s, no jitter). A key left out takes these defaults, not
    the retry ones, which is why this is a subclass rather than a second default value."""

    initial: PositiveDuration = Field(default=0.5, description="Delay after the first failure.")
    max: PositiveDuration = Field(default=30.0, description="Upper bound of the restart delay.")
    factor: Float = Field(
        default=2.0, ge=1, le=100, description="Growth of the delay per failure in a row."
    )
    jitter: Float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Random spread as a fraction of the delay (0 to 1).",
    )


class CrashLimitConfig(BaseModel):
    """How many crashes of a queue's running workers, within how long, fail the queue."""

    model_config = FROZEN

    # A poison job's retries back off, so its crashes grow rarer: one such job alone
    # should not fail its queue, a crash loop should.
    count: Int = Field(
        default=10, ge=1, le=1000,
        description="Worker crashes within `window` that mark the queue failed.",
    )
    window: PositiveDuration = Field(
        default=300.0, description="The span over which crashes are counted."
    )


class QueueConfig(BaseModel):
    """One queue: how many worker processes and threads run it, and its job policy."""

    model_config = FROZEN

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
    backoff: BackoffConfig = Field(default=BackoffConfig(), description="Retry delay policy.")
    max_jobs: Int | None = Field(
        default=None, ge=1, description="Recycle a worker process after this many jobs."
    )
    max_memory: Size | None = Field(
        default=None, description="Recycle a worker process above this RSS (at least 32MiB)."
    )
    poll_interval: PositiveDuration | None = Field(
        default=None, description="Polling period of this queue; defaults to the top-level one."
    )
    prefetch: Prefetch = Field(
        default="auto",
        description="Jobs claimed beyond free slots; auto: what the threads get through in "
                    "two round trips at the measured job time (claims of at most 1000, "
                    "prefetched args within 16MiB).",
    )
    tasks: list[ModuleName] = Field(
        default_factory=list, description="Extra task modules only this queue imports."
    )
    # Flow control (docs/flow-control.md): any of the three makes the queue's workers use
    # the limited claim; without them the plain claim runs and concurrency keys are ignored.
    global_concurrency: Int | None = Field(
        default=None, ge=1, le=MAX_CONCURRENCY,
        description="At most this many jobs of the queue running at once, across every host.",
    )
    rate_limit: RateText | None = Field(
        default=None,
        description='At most this many job starts in any window, fleet-wide: "100/s", '
        '"30/m", "1000/h".',
    )
    key_concurrency: Int | None = Field(
        default=None, ge=1, le=MAX_CONCURRENCY,
        description="At most this many running jobs per concurrency_key (1 when the queue "
        "has any flow control and this is left out).",
    )

    def flow_limits(self) -> FlowLimits | None:
        """The queue's flow control, or None when it has none."""
        if (self.global_concurrency is None and self.rate_limit is None
                and self.key_concurrency is None):
            return None
        return FlowLimits(
            global_concurrency=self.global_concurrency,
            rate=parse_rate(self.rate_limit) if self.rate_limit is not None else None,
            key_concurrency=self.key_concurrency or 1,
        )

    @model_validator(mode="after")
    def _no_prefetch_under_limits(self) -> QueueConfig:
        # A prefetched job is running in the database while it waits for a thread: it
        # would hold a global or per-key slot, and spend a start of the rate, idle. The
        # default, auto, prefetches nothing on such a queue (pgfleet.worker.claims).
        if self.prefetch not in (0, "auto") and self.flow_limits() is not None:
            relation_error(
                "QueueConfig", ("prefetch",),
                "prefetch must be 0 or auto on a queue with global_concurrency, rate_limit or "
                "key_concurrency: prefetched jobs would hold slots no thread runs",
                self.prefetch,
            )
        return self

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


class ScheduleConfig(BaseModel):
    """A cron entry: at each fire time one job is enqueued, once across all hosts."""

    model_config = FROZEN

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

    def definition(self) -> dict[str, Any]:
        """The schedule as published to pgfleet.schedules: every field that decides what
        fires and when, in JSON types."""
        return self.model_dump(mode="json")

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


class MetricsConfig(BaseModel):
    """The Prometheus exporter of this host."""

    model_config = FROZEN

    enabled: bool = Field(default=True, description="Serve /metrics, /livez and /readyz.")
    listen: str = Field(
        default="127.0.0.1:9464", description="host:port to bind; [::1]:9464 for IPv6."
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        parse_listen(value)
        return value


class WebConfig(BaseModel):
    """The web UI (`pgfleet[web]`), run by the supervisor as one more child."""

    model_config = FROZEN

    enabled: bool = Field(
        default=False,
        description="Run the web UI; a `web:` section turns it on unless it says false.",
    )
    listen: str = Field(
        default="127.0.0.1:8080",
        description="host:port to serve on; anything but loopback needs a token or basic "
                    "auth, and TLS or behind_proxy.",
    )
    read_only: bool = Field(default=False, description="Show everything, change nothing.")
    token_file: str | None = Field(
        default=None, description="File holding the access token (else PGFLEET_WEB_TOKEN)."
    )
    basic_auth_file: str | None = Field(
        default=None,
        description="File holding user:password for basic auth (else PGFLEET_WEB_BASIC_AUTH).",
    )
    behind_proxy: bool = Field(
        default=False,
        description="A reverse proxy is in front: its X-Forwarded-Host counts in the origin "
                    "check of forms (only Host otherwise), and it terminates TLS.",
    )
    viewer_token_file: str | None = Field(
        default=None,
        description="File holding a token that may look but not act (else "
                    "PGFLEET_WEB_VIEWER_TOKEN).",
    )
    tls_cert: str | None = Field(
        default=None, description="Serve HTTPS with this certificate chain (PEM file).",
    )
    tls_key: str | None = Field(
        default=None, description="The private key of tls_cert (PEM file, mode 600).",
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        parse_listen(value)
        return value


class SupervisorConfig(BaseModel):
    """Liveness and restart policy of the per-host supervisor."""

    model_config = FROZEN

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
    restart_backoff: RestartBackoffConfig = Field(
        default=RestartBackoffConfig(), description="Delay between worker restarts."
    )
    max_start_failures: Int = Field(
        default=5, ge=1, le=1000, description="Start-up failures in a row before a queue is failed."
    )
    crash_limit: CrashLimitConfig = Field(
        default=CrashLimitConfig(),
        description="Crashes of running workers that mark a queue failed.",
    )

    @model_validator(mode="after")
    def _heartbeat_fits(self) -> SupervisorConfig:
        # Two missed heartbeats, not one delayed write, should make a worker stale.
        if self.heartbeat_interval >= self.stale_after / 2:
            relation_error(
                "SupervisorConfig",
                ("heartbeat_interval",),
                f"heartbeat_interval ({format_duration(self.heartbeat_interval)}) must be "
                f"less than half of stale_after ({format_duration(self.stale_after)})",
                self.heartbeat_interval,
            )
        return self


class MaintenanceConfig(BaseModel):
    """Rescue of dead workers' jobs, pruning of finished jobs, queue gauges."""

    model_config = FROZEN

    interval: PositiveDuration = Field(default=1.0, description="Period of the maintenance pass.")
    retention: PositiveDuration = Field(
        default=7 * 86400.0, description="Finished jobs older than this are deleted."
    )
    prune_batch: Int = Field(
        default=10000, ge=1, le=1_000_000, description="Rows deleted per batch."
    )


class Config(BaseModel):
    """The whole pgfleet.yaml file."""

    model_config = FROZEN

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
    middleware: list[CallableName] = Field(
        default_factory=list,
        description="Callables (module.name) wrapping every job run and enqueue of the "
        "workers, outermost first (docs/integrations.md).",
    )
    notify: bool = Field(
        default=True, description="Wake workers with LISTEN/NOTIFY (polling stays)."
    )
    poll_interval: PositiveDuration = Field(default=1.0, description="How often idle workers poll.")
    queues: dict[Name, QueueConfig] = Field(
        min_length=1, description="Queues this host runs, by name."
    )
    schedules: dict[Name, ScheduleConfig] = Field(
        default_factory=dict, description="Cron entries, by name."
    )
    metrics: MetricsConfig = Field(default=MetricsConfig(), description="Prometheus exporter.")
    web: WebConfig = Field(default=WebConfig(), description="Web UI.")
    supervisor: SupervisorConfig = Field(default=SupervisorConfig(), description="Supervisor.")
    maintenance: MaintenanceConfig = Field(
        default=MaintenanceConfig(), description="Maintenance pass."
    )

    @field_validator("web", mode="before")
    @classmethod
    def _web_section_turns_it_on(cls, value: object) -> object:
        # Writing a `web:` section is asking for the UI; `enabled: false` keeps the
        # section (say, for later) without running it.
        if value is None:
            return {"enabled": True}
        if isinstance(value, dict) and "enabled" not in value:
            return {"enabled": True, **value}
        return value

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
            relation_error(
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
    # Values taken from the environment by `${VAR}`, by name: hidden in every message.
    _interpolated: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def source(self) -> str:
        """The file this config was read from (`<config>` when built in code)."""
        return self._source

    def where(self, *path: str | int) -> str:
        """`FILE:LINE: key.path` for a key path of this config."""
        return f"{self._source}:{line_for(tuple(path), self._lines)}: {dotted(tuple(path))}"

    def hide_values(self, messages: list[str]) -> list[str]:
        """`messages` with every value this file took from the environment shown as
        `${NAME}`: checks made after validation (a task module, a schedule's task, the
        web section) quote values, and a variable may hold a password."""
        return [without_values(m, self._interpolated) for m in messages]

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
