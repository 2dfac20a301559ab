"""The @task decorator and the registry that workers run from.

A worker only runs functions found in the registry, which is filled by importing the
modules named in the configuration. A task name read from the database is only ever a
key into that registry: it is never imported or resolved as a path.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, overload

from pgfleet.core.backoff import Backoff
from pgfleet.errors import PgfleetError


class PermanentError(PgfleetError):
    """Raise from a task to fail the job for good: it goes to `dead` without retries."""


class InvalidArguments(PermanentError):
    """The job's args do not fit the task's signature."""


# The longest a Snooze or a Retry may put a job off: a year, like an enqueue's delay.
MAX_DELAY = 366 * 86400.0


def _delay(name: str, seconds: float | timedelta) -> float:
    value = _seconds(seconds)
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 <= value <= MAX_DELAY:
        raise ValueError(f"{name}: expected seconds between 0 and {MAX_DELAY:.0f}, "
                         f"got {seconds!r}")
    return float(value)


class Snooze(Exception):
    """Raise from a task to run its job again after `seconds` without spending an attempt.
    A job may snooze MAX_SNOOZES times; after that a snooze spends an attempt like
    Retry(delay=seconds), so a task that always snoozes still ends."""

    def __init__(self, seconds: float | timedelta) -> None:
        self.seconds = _delay("Snooze", seconds)
        super().__init__(f"snoozed for {self.seconds:g}s")


class Retry(Exception):
    """Raise from a task to fail this attempt and run again after `delay` seconds (the
    task's backoff when None). It spends an attempt: past max_attempts the job is dead."""

    def __init__(self, message: str = "retry requested", *,
                 delay: float | timedelta | None = None) -> None:
        self.delay = None if delay is None else _delay("Retry", delay)
        super().__init__(message)


# retry_on: exception classes whose failures are retried, or a function of the exception
# that says whether to retry. Other exceptions fail the job for good.
RetryOn = tuple[type[BaseException], ...] | Callable[[BaseException], bool]


@dataclass(frozen=True)
class Task:
    name: str
    fn: Callable[..., Any]
    queue: str | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    backoff: Backoff | None = None
    is_async: bool = field(default=False)
    retry_on: RetryOn | None = None

    def retries(self, exc: BaseException) -> bool:
        """Whether a failure with `exc` may be retried (before max_attempts); a retry_on
        function that raises counts as no."""
        if self.retry_on is None:
            return True
        if isinstance(self.retry_on, tuple):
            return isinstance(exc, self.retry_on)
        try:
            return bool(self.retry_on(exc))
        except BaseException:  # SystemExit too: it must not escape the job's thread
            return False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def bind(self, args: Any) -> inspect.BoundArguments:
        """Check job args against the signature before the call, so a bad row fails as
        'invalid arguments' instead of a TypeError from deep inside the task."""
        if not isinstance(args, dict):
            raise InvalidArguments(
                f"invalid arguments: args must be a JSON object, got {type(args).__name__}"
            )
        try:
            return _signature(self.fn).bind(**args)
        except TypeError as exc:
            raise InvalidArguments(f"invalid arguments: {exc}") from None

    def keywords(self, args: Any) -> dict[str, Any]:
        """`args` checked as bind() checks them, to call the task with as keywords (what
        bind accepts, fn(**args) takes alike). For a signature of plain named parameters
        the check is two set comparisons; Signature.bind took ~2.5 us of the ~7 us an
        executor thread spends on a no-op job."""
        names = _keyword_names(self.fn)
        if names is not None and isinstance(args, dict):
            accepted, required = names
            if required <= args.keys() <= accepted:
                return args
        self.bind(args)  # refuses with bind's message, or accepts what the sets could not
        return dict(args)


_TASKS: dict[str, Task] = {}


@functools.cache
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    # inspect.signature costs tens of microseconds; a worker binds every job's args.
    return inspect.signature(fn)


@functools.cache
def _keyword_names(fn: Callable[..., Any]) -> tuple[frozenset[str], frozenset[str]] | None:
    """(accepted, required) parameter names when every parameter can be passed by name
    and none collects the rest (*args, **kwargs, positional-only): then exactly the
    keyword sets with required <= keys <= accepted bind. None for any other signature."""
    parameters = _signature(fn).parameters.values()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind not in named for p in parameters):
        return None
    return (frozenset(p.name for p in parameters),
            frozenset(p.name for p in parameters if p.default is inspect.Parameter.empty))


def _seconds(value: float | timedelta | None) -> float | None:
    return value.total_seconds() if isinstance(value, timedelta) else value


def _backoff(value: Backoff | Mapping[str, float] | None) -> Backoff | None:
    if value is None or isinstance(value, Backoff):
        return value
    return Backoff(**dict(value))


@overload
def task(fn: Callable[..., Any], /) -> Task: ...
@overload
def task(
    *,
    name: str | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    timeout: float | timedelta | None = None,
    backoff: Backoff | Mapping[str, float] | None = None,
    retry_on: RetryOn | type[BaseException] | None = None,
) -> Callable[[Callable[..., Any]], Task]: ...


def task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    timeout: float | timedelta | None = None,
    backoff: Backoff | Mapping[str, float] | None = None,
    retry_on: RetryOn | type[BaseException] | None = None,
) -> Task | Callable[[Callable[..., Any]], Task]:
    """Register a function (plain or `async def`) as a task.

    The default name is `module.function`. `queue` and `max_attempts` are defaults for
    enqueueing; `timeout` and `backoff` override the queue's settings for this task.
    `retry_on` (exception classes, or a function of the exception returning whether to
    retry) limits which failures are retried: any other fails the job for good.
    """
    rules = _retry_rules(retry_on)

    def register(f: Callable[..., Any]) -> Task:
        task_name = name or f"{f.__module__}.{f.__qualname__}"
        existing = _TASKS.get(task_name)
        if existing is not None and existing.fn is not f:
            same_place = (existing.fn.__module__, existing.fn.__qualname__) == (
                f.__module__, f.__qualname__)
            if not same_place:
                raise PgfleetError(f"task name {task_name!r} is registered twice")
        created = Task(
            name=task_name, fn=f, queue=queue, max_attempts=max_attempts,
            timeout=_seconds(timeout), backoff=_backoff(backoff),
            is_async=inspect.iscoroutinefunction(f), retry_on=rules,
        )
        _TASKS[task_name] = created
        return created

    return register(fn) if fn is not None else register


def _retry_rules(value: RetryOn | type[BaseException] | None) -> RetryOn | None:
    if value is None or isinstance(value, tuple):
        if value and not all(isinstance(c, type) and issubclass(c, BaseException)
                             for c in value):
            raise PgfleetError(f"retry_on: expected exception classes, got {value!r}")
        return value
    if isinstance(value, type) and issubclass(value, BaseException):
        return (value,)
    if callable(value) and not isinstance(value, type):
        rule: Callable[[BaseException], bool] = value
        return rule
    raise PgfleetError(f"retry_on: expected exception classes or a function, got {value!r}")


class Registry:
    """The tasks a worker may run, looked up by name and never by import."""

    def __init__(self, tasks: Mapping[str, Task]) -> None:
        self._tasks = dict(tasks)

    def get(self, name: str) -> Task | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)


def load_registry(modules: Iterable[str]) -> Registry:
    """Import the configured task modules (operator input, never job data) and return
    every task registered so far."""
    for module in modules:
        importlib.import_module(module)
    return Registry(_TASKS)
