"""The executor: threads that run task code, the jobs they hold, and the asynchronous
interrupts (timeout, lost lease) raised inside them.

Executor threads never touch the database: they take a Running from `todo`, run it, put
its Outcome on `outcomes` and poke the main loop's wake-up pipe."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import queue as queue_module
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pgfleet import context, metrics, payload, store
from pgfleet.errors import PayloadError
from pgfleet.supervisor.process_groups import kill_thread_processes
from pgfleet.tasks import PermanentError, Registry, Task
from pgfleet.worker.job_log import UnknownTasks, interrupted

log = logging.getLogger("pgfleet.worker")

MAX_ERROR_CHARS = 4000


class JobTimeout(BaseException):
    """Raised inside a job's thread when it passes its timeout. A BaseException, so a
    task's `except Exception` does not swallow it."""


class LeaseLost(BaseException):
    """Raised inside a job's thread when its row is no longer this worker's (rescued after
    a freeze, cancelled, deleted): whatever it does next would be refused anyway."""


class WorkerStopping(BaseException):
    """Raised inside a job's thread when its worker stops before the job ended: once the
    thread has left the task, the job may be given back."""


class UnknownTask(Exception):
    """An unknown task is retried with backoff: during a rolling deploy another host may
    know it. After max_attempts it is dead like any failure."""


@dataclass
class Running:
    """A job handed to an executor thread."""

    job: store.ClaimedJob
    task: Task | None
    label: str
    timeout: float
    # Set once, when an executor thread starts the job; 0 while it waits for a thread.
    deadline: float = 0.0
    started: float = 0.0
    thread_id: int | None = None
    interrupted: bool = False
    lost: bool = False  # the row is no longer held by this worker at this attempt


@dataclass
class Outcome:
    running: Running
    error: str | None = None
    final: bool = False
    timed_out: bool = False
    stopped: bool = False  # ended by WorkerStopping: to be given back, not recorded
    seconds: float = 0.0


def truncate(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f"… [{len(text)} chars]"


def describe_exception(exc: BaseException) -> str:
    """Error text for the job row; survives an exception whose __str__ raises."""
    try:
        message = str(exc)
    except Exception:  # a hostile __str__ must not take the worker down
        message = "<unprintable exception>"
    try:
        tb = "".join(traceback.format_tb(exc.__traceback__)[-5:])
    except Exception:
        tb = ""
    return truncate(f"{type(exc).__name__}: {message}\n{tb}".strip())


class Executor:
    def __init__(self, *, queue: str, worker_id: str, args_limit: int,
                 wake: Callable[[], None]) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.args_limit = args_limit
        self.wake = wake
        self.todo: queue_module.SimpleQueue[Running | None] = queue_module.SimpleQueue()
        self.outcomes: queue_module.SimpleQueue[Outcome] = queue_module.SimpleQueue()
        self.running: dict[int, Running] = {}
        self.unknown_tasks = UnknownTasks()
        self.guard = threading.Lock()  # orders thread ids against interrupts
        self.threads: list[threading.Thread] = []

    def start(self, count: int) -> None:
        for index in range(count):
            thread = threading.Thread(target=self._serve, name=f"pgfleet-job-{index}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)

    def submit(self, job: store.ClaimedJob, registry: Registry, default_timeout: float) -> str:
        """Queue a claimed job for the threads; returns its task label for the metrics."""
        task = registry.get(job.task)
        if task is None:
            self.unknown_tasks.report(job, self.queue, registry.names())
        label = job.task if task is not None else metrics.UNKNOWN_TASK_LABEL
        timeout = (task.timeout if task and task.timeout else None) or default_timeout
        running = Running(job=job, task=task, label=label, timeout=timeout)
        self.running[job.id] = running
        self.todo.put(running)
        return label

    def release(self, job_id: int) -> None:
        """The job's outcome is committed (or given up): its slot is free."""
        self.running.pop(job_id, None)

    def finished(self) -> list[Outcome]:
        """Outcomes the threads produced since the last call."""
        found = []
        while True:
            try:
                found.append(self.outcomes.get_nowait())
            except queue_module.Empty:
                return found

    def stop(self) -> None:
        """Ask idle threads to end; a thread inside a job ends with the process."""
        for _ in self.threads:
            self.todo.put(None)

    # ---- in the executor threads --------------------------------------------------------

    def _serve(self) -> None:
        get, put, wake = self.todo.get, self.outcomes.put, self.wake
        while True:
            try:
                running = get()
                if running is None:
                    return
                put(self._execute(running))
                wake()
            except (JobTimeout, LeaseLost, WorkerStopping):
                # An interrupt that landed just after its job had ended: nothing to do.
                continue

    def _execute(self, running: Running) -> Outcome:
        started = time.monotonic()
        with self.guard:
            running.started = started
            running.thread_id = threading.get_ident()
            running.deadline = started + running.timeout
        outcome = Outcome(running)
        job = running.job
        context.set_current(context.JobContext(
            id=job.id, queue=self.queue, task=job.task, attempt=job.attempt,
            max_attempts=job.max_attempts, worker=self.worker_id,
        ))
        try:
            self._call(running)
        except JobTimeout:
            outcome.error = f"timed out after {running.timeout:.1f}s"
            outcome.timed_out = True
            _end_processes(job.id)
        except LeaseLost:
            outcome.error = "stopped: the job was taken over, cancelled or deleted"
            _end_processes(job.id)
        except WorkerStopping:
            outcome.error = "stopped: the worker is stopping"
            outcome.stopped = True
            _end_processes(job.id)
        except PermanentError as exc:
            outcome.error = describe_exception(exc)
            outcome.final = True
        except BaseException as exc:
            outcome.error = describe_exception(exc)
        finally:
            with self.guard:
                running.thread_id = None
            context.set_current(None)
        outcome.seconds = time.monotonic() - started
        return outcome

    def _call(self, running: Running) -> None:
        job, task = running.job, running.task
        if running.lost:
            raise LeaseLost()  # taken over while it waited for a thread (prefetch)
        if task is None:
            raise UnknownTask(f"unknown task {job.task!r}")
        try:
            # Decoded here, in the job's own thread: a hostile row fails its job alone.
            args = payload.load_args(job.args, job.args_size, self.args_limit)
        except PayloadError as exc:
            raise PermanentError(f"refused {exc}") from None
        bound = task.bind(args)
        if task.is_async:
            remaining = max(0.001, running.deadline - time.monotonic())
            asyncio.run(_with_timeout(task.fn(*bound.args, **bound.kwargs), remaining))
        else:
            task.fn(*bound.args, **bound.kwargs)

    # ---- from the main thread -------------------------------------------------------------

    def overdue(self, now: float, kill_grace: float) -> tuple[list[Running], list[Running]]:
        """(jobs past their deadline not yet interrupted, interrupted jobs past the grace)."""
        late, stuck = [], []
        for running in self.running.values():
            if not running.deadline or now < running.deadline:
                continue
            if not running.interrupted:
                late.append(running)
            elif now >= running.deadline + kill_grace:
                stuck.append(running)
        return late, stuck

    def withdraw_waiting(self) -> set[int]:
        """Mark every job no thread has started as lost, so a thread that takes it later
        raises LeaseLost before any task code; returns their ids. Under the guard, against
        a thread starting one of them right now."""
        withdrawn = set()
        with self.guard:
            for job_id, running in self.running.items():
                if not running.started:
                    running.lost = True
                    withdrawn.add(job_id)
        return withdrawn

    def interrupt(self, running: Running, reason: type[BaseException] = JobTimeout) -> None:
        """Raise `reason` in the job's thread at its next bytecode. A thread blocked in C
        (a sleep, a socket read) sees it only when that call returns."""
        if reason is JobTimeout:
            running.interrupted = True
        elif reason is LeaseLost:
            running.lost = True
        with self.guard:
            if running.thread_id is None:
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(running.thread_id), ctypes.py_object(reason)
            )
        if reason is WorkerStopping:
            log.warning("job %d must stop: the worker is stopping; interrupting it",
                        running.job.id)
        else:
            interrupted(running.job, self.queue, timed_out=reason is JobTimeout,
                        timeout=running.timeout)


def _end_processes(job_id: int) -> None:
    """A job stopped from outside (timeout, takeover, stop): the processes its thread
    started die with it, before its outcome can release the job."""
    killed: list[int] = []
    for _ in range(3):  # a second interrupt (a stop after a timeout) may land meanwhile
        try:
            killed += kill_thread_processes(threading.get_native_id())
            break
        except (JobTimeout, LeaseLost, WorkerStopping):
            continue
    if killed:
        log.warning("job %d stopped: killed %d process(es) it started: %s", job_id,
                    len(killed), killed)


async def _with_timeout(coro: Any, seconds: float) -> Any:
    try:
        return await asyncio.wait_for(coro, seconds)
    except TimeoutError:
        raise JobTimeout() from None
