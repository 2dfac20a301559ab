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
from dataclasses import dataclass, field
from typing import Any

from pgfleet import context, metrics, middleware
from pgfleet.core import payload
from pgfleet.errors import PayloadError
from pgfleet.runtime.process_groups import kill_thread_processes
from pgfleet.sql import store
from pgfleet.tasks import PermanentError, Registry, Retry, Snooze, Task
from pgfleet.worker.job_log import UnknownTasks, interrupted

log = logging.getLogger("pgfleet.worker")

MAX_ERROR_CHARS = 4000
# Seconds an async job's interrupt from outside waits after its timeout: the coroutine's
# own cancellation normally ends it first (see Executor._execute).
ASYNC_GRACE = 1.0


class JobTimeout(BaseException):
    """Raised inside a job's thread when it passes its timeout. A BaseException, so a
    task's `except Exception` does not swallow it."""


class AsyncTimeout(JobTimeout):
    """An async job's own timeout (asyncio.wait_for): raised inside the coroutine, so its
    event loop is intact and stays in use."""


class LeaseLost(BaseException):
    """Raised inside a job's thread when its row is no longer this worker's (rescued after
    a freeze, cancelled, deleted): whatever it does next would be refused anyway."""


class WorkerStopping(BaseException):
    """Raised inside a job's thread when its worker stops before the job ended: once the
    thread has left the task, the job may be given back."""


class Cancelled(BaseException):
    """Raised inside a job's thread CANCEL_GRACE seconds after someone cancelled its job,
    if the task has not returned by then. A BaseException: cleanup goes in `finally`."""


# How long a cancelled task has to notice `current_job().cancelled` and return before the
# worker interrupts it (then, like a timeout, kill_grace before the process is replaced).
CANCEL_GRACE = 0.5


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
    lost: bool = False  # the row is no longer held by this run's fence
    # Given back before any thread started it (a stopping worker, or prefetch auto giving
    # back slow jobs): no thread runs it and it has no outcome.
    withdrawn: bool = False
    control: context.JobControl = field(default_factory=context.JobControl)
    progress_written_at: float = 0.0  # the main thread's throttle of progress writes
    # The task's return value, kept as soon as it returns: an interrupt that lands after
    # (in middleware, in storing the result) must not undo a run that is over.
    returned: tuple[Any] | None = None


@dataclass
class Outcome:
    running: Running
    error: str | None = None
    final: bool = False
    timed_out: bool = False
    stopped: bool = False  # ended by WorkerStopping: to be given back, not recorded
    seconds: float = 0.0
    result: str | None = None  # the return value as JSON text (None: the task returned None)
    cancelled: bool = False  # someone cancelled the job while it ran: it ends cancelled
    snooze: float | None = None  # pgfleet.Snooze: back after this many seconds, no attempt
    retry_delay: float | None = None  # pgfleet.Retry(delay=...): instead of the backoff


def last_progress(ended: list[Outcome]) -> list[tuple[int, int, str]]:
    """(id, fence, progress JSON) of ended jobs whose latest report is unwritten: the
    throttle of Executor.progress_due does not apply to a job's last report."""
    due = []
    for outcome in ended:
        running = outcome.running
        control = running.control
        if control.progress is not None and control.reported != control.written:
            control.written = control.reported
            due.append((running.job.id, running.job.fence, control.progress))
    return due


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
                 wake: Callable[[], None],
                 note_running: Callable[[int, int], None] | None = None) -> None:
        self.queue = queue
        # (thread index, job id): the job whose task code a thread enters, for the
        # supervisor to know, should this process die, which jobs were running.
        self.note_running = note_running
        self.worker_id = worker_id
        self.args_limit = args_limit
        self.wake = wake
        self.todo: queue_module.SimpleQueue[Running | None] = queue_module.SimpleQueue()
        self.outcomes: queue_module.SimpleQueue[Outcome] = queue_module.SimpleQueue()
        self.running: dict[int, Running] = {}
        self.unreturned: set[int] = set()  # withdrawn; the give-back not yet committed
        self.unknown_tasks = UnknownTasks()
        self.guard = threading.Lock()  # orders thread ids against interrupts
        self.threads: list[threading.Thread] = []
        self.loops = EventLoops()
        # Open while the worker has its database connection. A job no thread has started
        # waits while it is closed: started during an outage, it would run to its end
        # unrecorded, then again once the worker gave it back. If the outage outlasts most
        # of the lease it goes back never run, uncharged.
        self.gate = threading.Event()
        self.gate.set()

    def start(self, count: int) -> None:
        for index in range(count):
            thread = threading.Thread(target=self._serve, args=(index,),
                                      name=f"pgfleet-job-{index}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def admit(self, job: store.ClaimedJob, registry: Registry,
              default_timeout: float) -> Running:
        """Take a claimed job as held (its task looked up, an unknown one reported); `hand`
        then gives it to the threads."""
        task = registry.get(job.task)
        if task is None:
            self.unknown_tasks.report(job, self.queue, registry.names())
        label = job.task if task is not None else metrics.UNKNOWN_TASK_LABEL
        timeout = (task.timeout if task and task.timeout else None) or default_timeout
        running = Running(job=job, task=task, label=label, timeout=timeout)
        self.running[job.id] = running
        return running

    def hand(self, running: Running) -> None:
        """Queue an admitted job for the threads."""
        self.todo.put(running)

    def run_inline(self, job: store.ClaimedJob, registry: Registry,
                   default_timeout: float) -> Outcome:
        """Run a claimed job in the calling thread, as an executor thread would (for
        pgfleet.testing). Only an async job's own timeout applies: no main loop watches."""
        task = registry.get(job.task)
        label = job.task if task is not None else metrics.UNKNOWN_TASK_LABEL
        timeout = (task.timeout if task and task.timeout else None) or default_timeout
        return self._execute(Running(job=job, task=task, label=label, timeout=timeout))

    def release(self, job_id: int) -> None:
        """The job's outcome is committed (or given up): its slot is free."""
        self.running.pop(job_id, None)
        self.unreturned.discard(job_id)

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
        self.gate.set()  # a job held at the gate was withdrawn by now
        for _ in self.threads:
            self.todo.put(None)

    # ---- in the executor threads --------------------------------------------------------

    def _serve(self, index: int) -> None:
        get, put, wake, note = self.todo.get, self.outcomes.put, self.wake, self.note_running
        while True:
            try:
                running = get()
                if running is None:
                    self.loops.close()
                    return
                if not self.gate.is_set():  # a plain read: wait() takes a lock per job
                    self.gate.wait()
                if running.withdrawn:
                    continue
                if note is not None:
                    note(index, running.job.id)
                outcome = self._execute(running)
                # Withdrawn while this thread was taking it: it raised LeaseLost before any
                # task code, and its row is already back in the queue.
                if not running.withdrawn:
                    put(outcome)
                    wake()
            except (JobTimeout, LeaseLost, WorkerStopping, Cancelled):
                # An interrupt that landed just after its job had ended: nothing to do.
                continue

    def _execute(self, running: Running) -> Outcome:
        started = time.monotonic()
        with self.guard:
            running.started = started
            running.thread_id = threading.get_ident()
            running.deadline = started + running.timeout
            if running.task is not None and running.task.is_async:
                # The coroutine's own timeout (wait_for) goes first and leaves its loop
                # intact; the interrupt from outside is for a loop blocked in sync code.
                running.deadline += ASYNC_GRACE
        outcome = Outcome(running)
        job = running.job
        current = context.JobContext(
            id=job.id, queue=self.queue, task=job.task, attempt=job.attempt,
            max_attempts=job.max_attempts, worker=self.worker_id, fence=job.fence,
            control=running.control,
        )
        context.set_current(current)
        try:
            outcome.result = _result_json(self._returned_value(running, current))
        except Cancelled:
            outcome.cancelled = True
            _end_processes(job.id)
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
        except Snooze as exc:
            outcome.snooze = exc.seconds
        except Retry as exc:
            outcome.error = describe_exception(exc)
            outcome.retry_delay = exc.delay
        except BaseException as exc:
            outcome.error = describe_exception(exc)
            # retry_on: a failure the task did not list fails the job for good.
            outcome.final = running.task is not None and not running.task.retries(exc)
        finally:
            with self.guard:
                running.thread_id = None
            context.set_current(None)
        outcome.seconds = time.monotonic() - started
        # However the task ended, a job cancelled meanwhile ends cancelled (a task that saw
        # current_job().cancelled and returned stopped cleanly); a lost row stays lost.
        outcome.cancelled = (outcome.cancelled or running.control.cancelled) \
            and not outcome.stopped and not running.lost
        return outcome

    def _returned_value(self, running: Running, current: context.JobContext) -> Any:
        """What the task returned. An interrupt (a timeout, a cancel, a stop, a lost lease)
        that arrives once it has returned, in middleware or on the way out, counts for
        nothing: the job ran to its end, and giving it back would run it again."""
        try:
            return self._call(running, current)
        except (JobTimeout, Cancelled, WorkerStopping, LeaseLost):
            if running.returned is None:
                raise
            log.info("job %d had returned when it was interrupted; its run counts",
                     running.job.id)
            return running.returned[0]

    def _call(self, running: Running, current: context.JobContext) -> Any:
        if running.lost:
            raise LeaseLost()  # taken over while it waited for a thread (prefetch)
        if running.control.cancelled:
            raise Cancelled()  # cancelled while it waited for a thread
        if not middleware.active():
            return self._invoke(running)
        event = middleware.JobRun(job=current, task=running.task, meta_json=running.job.meta)
        with middleware.around(event):
            try:
                value = self._invoke(running)
            except BaseException as exc:
                event.outcome = _outcome_name(exc)
                raise
            # A task that saw current_job().cancelled and returned ends cancelled.
            event.outcome = "cancelled" if running.control.cancelled else "succeeded"
        return value

    def _invoke(self, running: Running) -> Any:
        job, task = running.job, running.task
        if task is None:
            raise UnknownTask(f"unknown task {job.task!r}")
        try:
            # Decoded here, in the job's own thread: a hostile row fails its job alone.
            args = payload.load_args(job.args, job.args_size, self.args_limit)
        except PayloadError as exc:
            raise PermanentError(f"refused {exc}") from None
        keywords = task.keywords(args)
        if task.is_async:
            remaining = max(0.001, running.deadline - ASYNC_GRACE - time.monotonic())
            value = self.loops.run(_with_timeout(task.fn(**keywords), remaining))
        else:
            value = task.fn(**keywords)
        running.returned = (value,)
        return value

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

    def lost_runs(self) -> int:
        """Runs whose job this worker no longer holds and whose outcome is not yet
        committed: their task may still be running."""
        return sum(1 for running in self.running.values()
                   if running.lost and running.started and not running.withdrawn)

    def withdraw_waiting(self, keep: int = 0) -> set[int]:
        """Mark the jobs no thread has started, but the first `keep` in claim order, as
        withdrawn: a thread skips them (or raises LeaseLost before any task code), with no
        outcome. Returns every withdrawn job still held (a failed give-back's too). Under
        the guard, against a thread starting one right now."""
        withdrawn = set()
        with self.guard:
            for job_id, running in self.running.items():
                if running.started:
                    continue
                if not running.withdrawn and keep > 0:
                    keep -= 1
                    continue
                running.lost = running.withdrawn = True
                withdrawn.add(job_id)
        self.unreturned |= withdrawn
        return withdrawn

    def cancel(self, running: Running) -> None:
        """Someone cancelled the job: tell the task (current_job().cancelled) and bring its
        deadline to CANCEL_GRACE from now, so the timeout path interrupts it with
        Cancelled and, past kill_grace, replaces a process stuck in C."""
        if running.control.cancelled:
            return
        running.control.cancelled = True
        log.info("job %d was cancelled; it has %.1fs to stop before it is interrupted",
                 running.job.id, CANCEL_GRACE)
        with self.guard:
            # Only while a thread is inside the task: a job that has ended waits for its
            # commit, and a job not yet started raises Cancelled before any task code.
            if running.thread_id is not None and not running.interrupted:
                running.deadline = min(running.deadline, time.monotonic() + CANCEL_GRACE)

    def progress_due(self, now: float, every: float) -> list[tuple[int, int, str]]:
        """(id, fence, progress JSON) of jobs whose latest report is unwritten and whose
        last write is `every` seconds old; marks them written."""
        due = []
        for running in self.running.values():
            control = running.control
            text, reported = control.progress, control.reported
            if text is None or reported == control.written \
                    or now - running.progress_written_at < every:
                continue
            control.written = reported
            running.progress_written_at = now
            due.append((running.job.id, running.job.fence, text))
        return due

    def interrupt(self, running: Running, reason: type[BaseException] = JobTimeout) -> None:
        """Raise `reason` in the job's thread at its next bytecode. A thread blocked in C
        (a sleep, a socket read) sees it only when that call returns."""
        if reason is JobTimeout and running.control.cancelled:
            reason = Cancelled  # the deadline cancel() brought forward
        if reason in (JobTimeout, Cancelled):
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
        elif reason is Cancelled:
            log.warning("job %d was cancelled and has not stopped; interrupting it",
                        running.job.id)
        else:
            interrupted(running.job, self.queue, timed_out=reason is JobTimeout,
                        timeout=running.timeout)


def _result_json(value: Any) -> str | None:
    """A task's return value as the job's result. One that is not JSON or too large fails
    the job for good: running it again would repeat its side effects to the same end."""
    if value is None:
        return None
    try:
        return payload.value_json("result", value, payload.MAX_RESULT_BYTES)
    except PayloadError as exc:
        raise PermanentError(f"the task's return value could not be stored: {exc}") from None


def _outcome_name(exc: BaseException) -> str:
    """The outcome a middleware sees for a run that raised `exc`."""
    if isinstance(exc, JobTimeout):
        return "timed_out"
    if isinstance(exc, Cancelled):
        return "cancelled"
    if isinstance(exc, Snooze):
        return "snoozed"
    if isinstance(exc, LeaseLost):
        return "lost"
    if isinstance(exc, WorkerStopping):
        return "stopped"
    return "failed"


class EventLoops:
    """One asyncio event loop per executor thread, created at its first async job and
    reused by the next ones: a client, pool or Event made in one job stays usable in the
    next job of that thread (asyncio.run per job bound them to a closed loop).

    A loop is dropped after a job was interrupted from outside (timeout of a job blocking
    the loop, lost lease, stop): the exception may have landed inside the loop's own
    machinery, and the next job gets a fresh loop rather than a damaged one."""

    def __init__(self) -> None:
        self.local = threading.local()

    def run(self, coro: Any) -> Any:
        loop: asyncio.AbstractEventLoop | None = getattr(self.local, "loop", None)
        if loop is None or loop.is_closed():
            loop = self.local.loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        except (JobTimeout, LeaseLost, WorkerStopping) as exc:
            if type(exc) is not AsyncTimeout:  # thrown in from the main thread
                self._discard(loop)
            raise

    def close(self) -> None:
        """Close this thread's loop (the thread is ending)."""
        loop = getattr(self.local, "loop", None)
        if loop is not None:
            self._discard(loop)

    def _discard(self, loop: asyncio.AbstractEventLoop) -> None:
        self.local.loop = None
        try:
            if loop.is_running():
                return  # cannot close a loop that still runs; the thread drops it
            for pending in asyncio.all_tasks(loop):
                pending.cancel()
            loop.close()
        except Exception:  # a damaged loop: drop it unclosed rather than fail the thread
            log.debug("could not close a discarded event loop", exc_info=True)


def _end_processes(job_id: int) -> None:
    """A job stopped from outside (timeout, takeover, stop): the processes its thread
    started die with it, before its outcome can release the job."""
    killed: list[int] = []
    for _ in range(3):  # a second interrupt (a stop after a timeout) may land meanwhile
        try:
            killed += kill_thread_processes(threading.get_native_id())
            break
        except (JobTimeout, LeaseLost, WorkerStopping, Cancelled):
            continue
    if killed:
        log.warning("job %d stopped: killed %d process(es) it started: %s", job_id,
                    len(killed), killed)


async def _with_timeout(coro: Any, seconds: float) -> Any:
    try:
        return await asyncio.wait_for(coro, seconds)
    except TimeoutError:
        raise AsyncTimeout() from None
