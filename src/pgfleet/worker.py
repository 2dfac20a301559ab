"""The worker: claim → run → finish, for one queue, up to `threads` jobs at once.

The main thread owns the database connection: it claims batches, hands jobs to executor
threads, flushes their outcomes in batches, renews leases and heartbeats. Executor threads
only run task code. A listener thread (when notifications are on) holds a second
connection that LISTENs and wakes the main thread; polling runs regardless, so a lost
notification costs at most one poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import queue as queue_module
import random
import signal
import socket
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgfleet import context, metrics, store
from pgfleet.backoff import Backoff
from pgfleet.db import connect, scrub
from pgfleet.errors import DatabaseUnavailable
from pgfleet.listener import WAKE_ALL, Listener
from pgfleet.liveness import Beacon
from pgfleet.process import EXIT_LEASE_LOST, EXIT_RECYCLE, EXIT_TIMEOUT
from pgfleet.tasks import PermanentError, Registry, Task

log = logging.getLogger("pgfleet.worker")

EXIT_OK = 0
# Leases are renewed at every heartbeat; a worker that could not renew them for this
# fraction of the lease stops its jobs, because another host may take them at expiry.
LEASE_SAFETY = 0.8

MAX_ERROR_CHARS = 4000
DEFAULT_ARGS_LIMIT = 1024 * 1024


class JobTimeout(BaseException):
    """Raised inside a job's thread when it passes its timeout. A BaseException, so a
    task's `except Exception` does not swallow it."""


class LeaseLost(BaseException):
    """Raised inside a job's thread when its row is no longer this worker's (rescued after
    a freeze, cancelled, deleted): whatever it does next would be refused anyway."""


@dataclass
class WorkerSettings:
    dsn: str
    queue: str
    registry: Registry
    threads: int = 1
    prefetch: int = 0
    poll_interval: float = 1.0
    notify: bool = True
    lease: float = 60.0
    heartbeat_interval: float = 5.0
    timeout: float = 1800.0
    kill_grace: float = 10.0
    shutdown_timeout: float = 30.0
    backoff: Backoff = field(default_factory=Backoff)
    max_jobs: int | None = None
    max_memory: int | None = None
    args_limit: int = DEFAULT_ARGS_LIMIT
    worker_id: str = ""
    supervisor_id: str | None = None
    title: Callable[[str], None] | None = None
    beacon: Beacon | None = None


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


def default_worker_id(queue: str) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Worker:
    def __init__(self, settings: WorkerSettings) -> None:
        self.s = settings
        if not self.s.worker_id:
            self.s.worker_id = default_worker_id(settings.queue)
        self.wake = threading.Event()
        self.stop_mode: str | None = None  # None, "graceful" or "quick"
        self.stop_deadline = 0.0
        self.todo: queue_module.SimpleQueue[Running | None] = queue_module.SimpleQueue()
        self.outcomes: queue_module.SimpleQueue[Outcome] = queue_module.SimpleQueue()
        self.pending: list[Outcome] = []  # outcomes not yet committed
        self.running: dict[int, Running] = {}
        self.guard = threading.Lock()  # orders thread ids against timeout interrupts
        self.conn: psycopg.Connection[Any] | None = None
        self.listener: Listener | None = None
        self.claim_due = True
        self.next_poll = 0.0
        self.next_heartbeat = 0.0
        self.jobs_done = 0
        self.recycle_reason: str | None = None
        self.exit_code = EXIT_OK
        self.parent = os.getppid()
        self.job_limit = self._jittered_limit(settings.max_jobs)
        self.reconnect_delay = 0.0
        self.shown_busy = -1
        self.metric_children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.leases_renewed = time.monotonic()
        self.abandoned = False  # set when the process must exit without the database

    # ---- lifecycle -------------------------------------------------------------------

    @staticmethod
    def _jittered_limit(max_jobs: int | None) -> int | None:
        # ±10 % so a fleet started together does not recycle together.
        return None if max_jobs is None else max(1, round(max_jobs * random.uniform(0.9, 1.1)))

    def request_stop(self, mode: str) -> None:
        """Called from a signal handler: only records the wish and wakes the loop."""
        if self.stop_mode == "graceful" and mode == "graceful":
            mode = "quick"  # a second TERM escalates
        if self.stop_mode != "quick":
            self.stop_mode = mode
            self.stop_deadline = time.monotonic() + (
                self.s.shutdown_timeout if mode == "graceful" else 0.0
            )
        self.wake.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.request_stop("graceful"))
        signal.signal(signal.SIGINT, lambda *_: self.request_stop("quick"))
        signal.signal(signal.SIGQUIT, lambda *_: self.request_stop("quick"))

    def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        if not self._connect_first():
            return self.exit_code
        for index in range(self.s.threads):
            threading.Thread(
                target=self._executor, name=f"pgfleet-job-{index}", daemon=True
            ).start()
        if self.s.notify:
            self.listener = Listener(self.s.dsn, self._on_notify)
            self.listener.start()
        metrics.workers.labels(self.s.queue).inc()
        log.info("worker %s started on queue %r (threads=%d, notify=%s)",
                 self.s.worker_id, self.s.queue, self.s.threads, self.s.notify)
        try:
            self._loop()
        except BaseException:
            # An unexpected error: the job threads may still be running, so nothing is
            # given back with its attempt refunded. The process exits; the supervisor's
            # rescue (or the lease expiry) returns the jobs with the attempt counted.
            self.abandoned = True
            raise
        finally:
            metrics.workers.labels(self.s.queue).dec()
            self._shutdown()
        return self.exit_code

    def _loop(self) -> None:
        while True:
            now = time.monotonic()
            if self.s.beacon is not None:
                self.s.beacon.beat(len(self.running))
            if os.getppid() != self.parent:
                log.warning("parent process died; stopping")
                self.request_stop("quick")
            self._collect_outcomes()
            if self.running and now - self.leases_renewed > self.s.lease * LEASE_SAFETY:
                self._lease_lost(now)
            if self.stop_mode == "quick" or (
                self.stop_mode == "graceful"
                and (not self.running or now >= self.stop_deadline)
            ):
                return
            if self.recycle_reason and not self.running:
                self.exit_code = EXIT_RECYCLE
                log.info("worker %s recycling: %s", self.s.worker_id, self.recycle_reason)
                return
            if not self._db_step(now):
                continue
            self._enforce_timeouts(time.monotonic())
            self._set_title()
            self.wake.wait(self._wait_time())
            self.wake.clear()

    def _db_step(self, now: float) -> bool:
        """Flush, claim and heartbeat; on a lost connection, reconnect and retry."""
        try:
            self._ensure_connection()
            self._flush()
            if now >= self.next_heartbeat:
                self._heartbeat()
            if self._should_claim(now):
                self._claim()
            self.reconnect_delay = 0.0
            return True
        except psycopg.OperationalError as exc:
            self._connection_lost(exc)
            return False

    def _wait_time(self) -> float:
        # Wake at least twice a second to notice a dead parent and enforce timeouts.
        horizon = min(self.next_poll, self.next_heartbeat) - time.monotonic()
        return max(0.0, min(horizon, 0.5))

    # ---- database ----------------------------------------------------------------------

    def _connect_first(self) -> bool:
        """Wait for the database with backoff (it may come up after us); False if told
        to stop first. Beats meanwhile, so the supervisor sees a live, waiting process."""
        while True:
            try:
                self._ensure_connection(first=True)
                return True
            except (DatabaseUnavailable, psycopg.OperationalError) as exc:
                self._backoff_reconnect()
                log.error("worker %s: %s; retrying in %.1fs", self.s.worker_id,
                          scrub(str(exc), self.s.dsn), self.reconnect_delay)
            deadline = time.monotonic() + self.reconnect_delay
            while time.monotonic() < deadline:
                if self.s.beacon is not None:
                    self.s.beacon.beat(0)
                if self.stop_mode or os.getppid() != self.parent:
                    return False
                self.wake.wait(min(0.5, max(0.0, deadline - time.monotonic())))

    def _ensure_connection(self, first: bool = False) -> None:
        if self.conn is not None and not self.conn.closed:
            return
        if self.reconnect_delay and not first:
            self.wake.wait(self.reconnect_delay)
        try:
            self.conn = connect(self.s.dsn, autocommit=True)
        except DatabaseUnavailable as exc:
            if first:
                raise
            self._backoff_reconnect()
            raise psycopg.OperationalError(str(exc)) from None
        store.register_process(
            self.conn, id=self.s.worker_id, host=socket.gethostname(), pid=os.getpid(),
            kind="worker", queue=self.s.queue, supervisor=self.s.supervisor_id,
        )
        # A reconnect may have missed notifications: poll at once.
        self.claim_due = True
        if not first:
            log.info("worker %s reconnected", self.s.worker_id)

    def _backoff_reconnect(self) -> None:
        base = min(10.0, max(0.1, self.reconnect_delay * 2))
        self.reconnect_delay = random.uniform(base / 2, base)

    def _connection_lost(self, exc: BaseException) -> None:
        log.warning("worker %s lost its database connection: %s",
                    self.s.worker_id, scrub(str(exc).strip().splitlines()[0] if str(exc) else
                                            type(exc).__name__, self.s.dsn))
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        self._backoff_reconnect()

    def _should_claim(self, now: float) -> bool:
        if self.stop_mode or self.recycle_reason:
            return False
        if self._free_slots() <= 0:
            return False
        return self.claim_due or now >= self.next_poll

    def _free_slots(self) -> int:
        return self.s.threads + self.s.prefetch - len(self.running)

    def _claim(self) -> None:
        assert self.conn is not None
        limit = self._free_slots()
        jobs = store.claim(
            self.conn, queue=self.s.queue, limit=limit, worker=self.s.worker_id,
            lease=self.s.lease,
        )
        self._hand_out(jobs, limit)

    def _hand_out(self, jobs: list[store.ClaimedJob], limit: int) -> None:
        """Give claimed jobs to the executor threads (from _claim, or from _flush when the
        claim shared the completions' transaction)."""
        # A full batch suggests more are waiting: claim again as soon as a slot frees.
        self.claim_due = len(jobs) == limit
        self.next_poll = time.monotonic() + self.s.poll_interval
        if not jobs:
            return
        started: Counter[str] = Counter()
        for job in jobs:
            started[self._dispatch(job)] += 1
        for label, count in started.items():
            self._metric(metrics.jobs_started, self.s.queue, label).inc(count)

    def _dispatch(self, job: store.ClaimedJob) -> str:
        """Hand a claimed job to the executor threads; returns its task label."""
        task = self.s.registry.get(job.task)
        label = job.task if task is not None else metrics.UNKNOWN_TASK_LABEL
        timeout = (task.timeout if task and task.timeout else None) or self.s.timeout
        running = Running(job=job, task=task, label=label, timeout=timeout)
        self.running[job.id] = running
        self._metric(metrics.job_wait, self.s.queue).observe(max(0.0, job.wait_seconds))
        self.todo.put(running)
        return label

    def _heartbeat(self) -> None:
        assert self.conn is not None
        with self.conn.transaction():
            store.heartbeat_process(self.conn, self.s.worker_id)
            renewed = store.renew_leases(self.conn, worker=self.s.worker_id,
                                         lease=self.s.lease, ids=list(self.running))
        self.leases_renewed = time.monotonic()
        for job_id, running in self.running.items():
            if job_id not in renewed and not running.lost:
                running.lost = True
                self._interrupt(running, LeaseLost)
        self.next_heartbeat = time.monotonic() + self.s.heartbeat_interval
        if self.s.max_memory and not self.recycle_reason:
            rss = rss_bytes()
            if rss > self.s.max_memory:
                self.recycle_reason = f"RSS {rss} bytes over max_memory {self.s.max_memory}"

    def _collect_outcomes(self) -> None:
        while True:
            try:
                self.pending.append(self.outcomes.get_nowait())
            except queue_module.Empty:
                return

    def _flush(self) -> None:
        """Commit every collected outcome in at most two statements; a job's slot is freed
        only once its outcome is committed.

        When the main loop would claim right after, the claim joins the completions'
        transaction: one commit (one WAL flush) instead of two per batch. Not while
        stopping or recycling, and not for a batch with a timed-out job (the abandon path
        flushes one just before the process exits and must not take new work), nor when
        the batch brings the worker to max_jobs."""
        if not self.pending or self.conn is None:
            return
        batch = self.pending
        successes = [(o.running.job.id, o.running.job.attempt) for o in batch if o.error is None]
        failures = [self._failure(o) for o in batch if o.error is not None]
        limit = self._free_slots() + len(batch)  # every outcome of the batch frees a slot
        claim = (
            limit > 0 and self.stop_mode is None and not self.recycle_reason
            and (self.claim_due or time.monotonic() >= self.next_poll)
            and not any(o.timed_out for o in batch)
            # this batch would reach max_jobs: the worker recycles instead of claiming
            and (self.job_limit is None or self.jobs_done + len(batch) < self.job_limit)
        )
        jobs: list[store.ClaimedJob] = []
        if claim:
            with self.conn.transaction():
                held = store.complete_succeeded(self.conn, worker=self.s.worker_id,
                                                done=successes)
                states = store.complete_failed(self.conn, worker=self.s.worker_id,
                                               failures=failures)
                jobs = store.claim(self.conn, queue=self.s.queue, limit=limit,
                                   worker=self.s.worker_id, lease=self.s.lease)
        else:
            held = store.complete_succeeded(self.conn, worker=self.s.worker_id, done=successes)
            states = store.complete_failed(self.conn, worker=self.s.worker_id,
                                           failures=failures)
        self.pending = []
        # Counters move once per batch and label set: at high load a flush serves dozens
        # of jobs, and each metric update takes a lock and a file write.
        counts: Counter[tuple[Any, tuple[str, ...]]] = Counter()
        for outcome in batch:
            for key in self._account(outcome, held, states):
                counts[key] += 1
        for (metric, labels), count in counts.items():
            self._metric(metric, *labels).inc(count)
        if claim:
            # After the accounting: a failed job requeued without delay can come back in
            # this very claim, under the same id.
            self._hand_out(jobs, limit)
        if self.recycle_reason and not self.running:
            self.wake.set()  # recycle now rather than after the next wait

    def _metric(self, metric: Any, *labels: str) -> Any:
        """The labelled child of `metric`, cached: .labels() costs a lock and a lookup."""
        key = (id(metric), labels)
        child = self.metric_children.get(key)
        if child is None:
            child = self.metric_children[key] = metric.labels(*labels)
        return child

    def _failure(self, outcome: Outcome) -> store.Failure:
        job = outcome.running.job
        task = outcome.running.task
        backoff = (task.backoff if task and task.backoff else None) or self.s.backoff
        return store.Failure(
            id=job.id, attempt=job.attempt, error=outcome.error or "",
            delay=backoff.delay(job.attempt), final=outcome.final,
        )

    def _account(self, outcome: Outcome, held: set[int], states: dict[int, str]
                 ) -> list[tuple[Any, tuple[str, ...]]]:
        """Free the job's slot; returns the counters (metric, labels) to move by one."""
        running = outcome.running
        job = running.job
        self.running.pop(job.id, None)
        self.jobs_done += 1
        queue, label = self.s.queue, running.label
        self._metric(metrics.job_duration, queue, label).observe(outcome.seconds)
        if self.job_limit is not None and self.jobs_done >= self.job_limit:
            self.recycle_reason = self.recycle_reason or f"{self.jobs_done} jobs done"
        if outcome.error is None and job.id in held:
            return [(metrics.jobs_finished, (queue, label, "succeeded"))]
        if outcome.error is not None and job.id in states:
            kind = "timed_out" if outcome.timed_out else "failed"
            follow = ((metrics.jobs_finished, (queue, label, "dead")) if states[job.id] == "dead"
                      else (metrics.job_retries, (queue, label)))
            return [(metrics.jobs_finished, (queue, label, kind)), follow]
        log.warning("job %d attempt %d: lease lost (taken over or cancelled); "
                    "its outcome was discarded", job.id, job.attempt)
        return [(metrics.lease_lost, (queue,))]

    # ---- executing -----------------------------------------------------------------------

    def _executor(self) -> None:
        get, put, wake = self.todo.get, self.outcomes.put, self.wake
        while True:
            try:
                running = get()
                if running is None:
                    return
                put(self._execute(running))
                # Already set means the main loop has not cleared it yet, so it collects
                # this outcome in its next pass: skip Event.set's lock and notify_all.
                if not wake.is_set():
                    wake.set()
            except (JobTimeout, LeaseLost):
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
            id=job.id, queue=self.s.queue, task=job.task, attempt=job.attempt,
            max_attempts=job.max_attempts, worker=self.s.worker_id,
        ))
        try:
            self._call(running)
        except JobTimeout:
            outcome.error = f"timed out after {running.timeout:.1f}s"
            outcome.timed_out = True
        except LeaseLost:
            outcome.error = "stopped: the job was taken over, cancelled or deleted"
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
        if job.args_size > self.s.args_limit:
            raise PermanentError(
                f"args are {job.args_size} bytes, over the limit of {self.s.args_limit}"
            )
        bound = task.bind(job.args)
        if task.is_async:
            remaining = max(0.001, running.deadline - time.monotonic())
            asyncio.run(_with_timeout(task.fn(*bound.args, **bound.kwargs), remaining))
        else:
            task.fn(*bound.args, **bound.kwargs)

    def _enforce_timeouts(self, now: float) -> None:
        for running in list(self.running.values()):
            if not running.deadline or now < running.deadline:
                continue
            if not running.interrupted:
                running.interrupted = True
                self._interrupt(running)
            elif now >= running.deadline + self.s.kill_grace:
                self._abandon(running)

    def _interrupt(self, running: Running, reason: type[BaseException] = JobTimeout) -> None:
        """Raise `reason` in the job's thread at its next bytecode. A thread blocked in C
        (a sleep, a socket read) sees it only when that call returns."""
        with self.guard:
            if running.thread_id is None:
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(running.thread_id), ctypes.py_object(reason)
            )
        log.warning("job %d %s; interrupting it", running.job.id,
                    "passed its timeout" if reason is JobTimeout else "is no longer ours")

    def _abandon(self, running: Running) -> None:
        """The job ignored the interrupt: record it as timed out, give the other jobs
        back, and exit so the supervisor starts a fresh process."""
        job = running.job
        log.error("job %d did not stop within kill_grace; exiting the worker", job.id)
        seconds = time.monotonic() - running.started
        self.pending.append(Outcome(
            running, error=f"timed out after {seconds:.1f}s; the worker process was replaced",
            timed_out=True, seconds=seconds,
        ))
        self._collect_outcomes()
        # If this fails, the lease expires and the rescue path records the job.
        with contextlib.suppress(psycopg.Error):
            self._flush()
        self.exit_code = EXIT_TIMEOUT
        self.stop_mode = "quick"
        self.wake.set()

    def _lease_lost(self, now: float) -> None:
        """The database has been out of reach for most of a lease. Past expiry another
        host may start these jobs, so this process must not be running them then: it
        exits, and the rescue (or the lease expiry) gives them back."""
        log.error("worker %s could not renew its leases for %.0fs (lease %.0fs); exiting "
                  "so that none of its %d job(s) can run twice", self.s.worker_id,
                  now - self.leases_renewed, self.s.lease, len(self.running))
        self.exit_code = EXIT_LEASE_LOST
        self.stop_mode = "quick"
        self.abandoned = True

    def _on_notify(self, queue: str) -> None:
        if queue in (self.s.queue, WAKE_ALL):
            self.claim_due = True
            self.wake.set()

    def _set_title(self) -> None:
        busy = len(self.running)
        if busy == self.shown_busy:
            return  # the loop can turn thousands of times a second; write only changes
        self.shown_busy = busy
        metrics.workers_busy.labels(self.s.queue).set(busy)
        if self.s.title is not None:
            self.s.title(f"{busy} jobs")

    # ---- stopping ------------------------------------------------------------------------

    def _shutdown(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self._collect_outcomes()
        if self.abandoned:
            log.info("worker %s stopped without the database", self.s.worker_id)
            return
        try:
            self._ensure_connection()
            assert self.conn is not None
            self._flush()
            if self.running:
                # Interrupted by the stop, not by their own fault: the attempt is refunded.
                ids = store.give_back(self.conn, worker=self.s.worker_id, ids=list(self.running))
                if ids:
                    log.info("gave back %d unfinished job(s): %s", len(ids), ids)
            store.unregister_process(self.conn, self.s.worker_id)
        except (psycopg.Error, DatabaseUnavailable) as exc:
            log.warning("could not record the shutdown: %s", scrub(str(exc), self.s.dsn))
        finally:
            if self.conn is not None:
                self.conn.close()
        for _ in range(self.s.threads):
            self.todo.put(None)
        log.info("worker %s stopped", self.s.worker_id)


class UnknownTask(Exception):
    """An unknown task is retried with backoff: during a rolling deploy another host may
    know it. After max_attempts it is dead like any failure."""


async def _with_timeout(coro: Any, seconds: float) -> Any:
    try:
        return await asyncio.wait_for(coro, seconds)
    except TimeoutError:
        raise JobTimeout() from None
