"""Middleware: code that wraps every job run and every enqueue of this process.

A middleware is a callable taking an event (a `JobRun` or an `Enqueueing`) and returning
a context manager; the work happens inside its `with` block:

    @contextlib.contextmanager
    def with_logging(event):
        if isinstance(event, pgfleet.middleware.JobRun):
            log.info("start %s attempt %d", event.job.task, event.job.attempt)
        yield
        log.info("done: %s", getattr(event, "outcome", None))

A context manager rather than a call-next function: the same middleware wraps a blocking
job run in a worker thread and an `await enqueue_async(...)` in an event loop, and sees
the exception of either. Middleware listed first is entered first (the outermost).

Middleware comes from the `middleware:` list of the configuration (loaded by workers
before their first job) or from `register()` in code (an application's process, a task
module). An exception a middleware swallows is raised again: a middleware cannot turn a
failed job or a failed enqueue into a success.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from pgfleet.context import JobContext
from pgfleet.errors import PgfleetError
from pgfleet.tasks import Task

T = TypeVar("T")


@dataclass
class JobRun:
    """One attempt of one job, in the worker thread that runs it. `outcome` is set before
    the middleware's `with` block ends: "succeeded", or "failed", "timed_out", "stopped"
    with the exception propagating."""

    job: JobContext
    task: Task | None  # None for a task this worker does not know (the job fails)
    meta_json: str | None = None  # as claimed; decoded on first use of `meta`
    outcome: str | None = None

    @property
    def meta(self) -> Mapping[str, Any]:
        """The job's meta (what the enqueue and its middleware stored), {} when none."""
        if self.meta_json is None:
            return {}
        decoded: Mapping[str, Any] = json.loads(self.meta_json)
        return decoded


@dataclass
class NewJob:
    """A job about to be enqueued. `meta` may be changed by a middleware: it is stored
    with the job and comes back as `JobRun.meta` when the job runs."""

    task: str
    queue: str | None  # None: the task's or the default queue, decided when validated
    args: Mapping[str, Any] | None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Enqueueing:
    """One call of enqueue / enqueue_many (or their async forms). `ids` is filled in
    before the middleware's `with` block ends, when the insert succeeded."""

    jobs: list[NewJob]
    ids: list[int] = field(default_factory=list)


Event = JobRun | Enqueueing
Middleware = Callable[[Any], AbstractContextManager[Any]]

_stack: list[Middleware] = []


def register(middleware: Middleware) -> Middleware:
    """Add a middleware for this process (usable as a decorator); registering the same
    one twice keeps one."""
    if not callable(middleware):
        raise PgfleetError(f"middleware {middleware!r} is not callable")
    if middleware not in _stack:
        _stack.append(middleware)
    return middleware


def unregister(middleware: Middleware) -> None:
    if middleware in _stack:
        _stack.remove(middleware)


def registered() -> list[Middleware]:
    return list(_stack)


def active() -> bool:
    """Is any middleware registered? (The worker's and bulk enqueue's fast path.)"""
    return bool(_stack)


def resolve(name: str) -> Middleware:
    """The callable a dotted `module.attribute` name of the configuration names (operator
    input, never job data). PgfleetError with one line if it cannot be found."""
    module_name, _, attribute = name.rpartition(".")
    if not module_name:
        raise PgfleetError(f"middleware {name!r}: expected module.callable")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PgfleetError(f"middleware {name!r}: cannot import {module_name!r}: "
                           f"{type(exc).__name__}: {exc}") from None
    found = getattr(module, attribute, None)
    if found is None or not callable(found):
        raise PgfleetError(f"middleware {name!r}: {module_name!r} has no callable "
                           f"{attribute!r}")
    return found  # type: ignore[no-any-return]


def load(names: Iterable[str]) -> None:
    """Register the middleware the configuration names, in order."""
    for name in names:
        register(resolve(name))


class around:  # lower case: it reads as a function, `with middleware.around(event):`
    """Enter every registered middleware for `event`, outermost first, and leave them in
    reverse order. A plain class, not ExitStack in a generator: it runs around every job,
    and this costs a third as much. The body's exception always propagates, even if a
    middleware swallowed it; an exception raised by a middleware replaces it."""

    __slots__ = ("entered", "event")

    def __init__(self, event: Event) -> None:
        self.event = event
        self.entered: list[AbstractContextManager[Any]] = []

    def __enter__(self) -> None:
        try:
            for middleware in _stack:
                manager = middleware(self.event)
                manager.__enter__()
                self.entered.append(manager)
        except BaseException as exc:
            _leave(self.entered, exc)
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _leave(self.entered, exc)


def _leave(entered: list[AbstractContextManager[Any]], exc: BaseException | None) -> None:
    """Exit `entered` innermost first, each told of the exception in flight; raise the
    last new exception a middleware raised (chained to what it replaced)."""
    replaced: BaseException | None = None
    while entered:
        manager = entered.pop()
        try:
            manager.__exit__(type(exc) if exc else None, exc,
                             exc.__traceback__ if exc else None)
        except BaseException as new:
            if new is not exc:
                if new.__context__ is None and exc is not None:
                    new.__context__ = exc
                exc = replaced = new
    if replaced is not None:
        raise replaced
