"""The worker: claim → run → finish, for one queue, up to `threads` jobs at once.

The main thread owns the database connection and runs a loop of fixed phases; each phase
runs on every pass, and no failure of one skips the others (so a database outage never
stops timeout enforcement):

    beat → parent → collect outcomes → timeouts → leases → stop? → database → wait

Executor threads only run task code. A listener thread (when notifications are on) holds
a second connection that LISTENs and wakes the loop; polling runs regardless, so a lost
notification costs at most one poll interval.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from pgfleet import metrics
from pgfleet.core import flow
from pgfleet.errors import DatabaseUnavailable
from pgfleet.runtime.child import BEAT_EVERY, ChildProcess
from pgfleet.runtime.exit_codes import EXIT_LEASE_LOST, EXIT_OK, EXIT_RECYCLE, EXIT_TIMEOUT
from pgfleet.runtime.process_groups import kill_job_processes
from pgfleet.sql import fleet as fleet_store, store
from pgfleet.sql.db import connect, first_line, scrub
from pgfleet.worker.batching import FLUSH_DELAY, Batching
from pgfleet.worker.cancels import TaskControl
from pgfleet.worker.claim_cursor import claim_full
from pgfleet.worker.claims import Claims
from pgfleet.worker.completer import Completer, MetricCache
from pgfleet.worker.defaults import publish as publish_defaults
from pgfleet.worker.display import BusyDisplay
from pgfleet.worker.events import WorkerEvents
from pgfleet.worker.executor import Executor, LeaseLost, Running, WorkerStopping, last_progress
from pgfleet.worker.leases import LEASE_SAFETY, Leases, start_watchdog
from pgfleet.worker.listener import WAKE_ALL, Listener
from pgfleet.worker.settings import WorkerSettings

# After claims that found nothing, the shortest time before a notification may ask for
# another: any role may NOTIFY the channel, and a flood of empty notifications must not
# become a flood of claims. A claim that found jobs sets no gap, so a job enqueued alone
# starts one round trip after its commit; nor does a single empty claim, because empty
# claims are common where a notification races a claim (the job it announced was taken by
# the claim before it, or by another worker), and with two workers gapping after each, a
# job arriving next would often wait up to the whole gap.
NOTIFY_GAP = 0.05
EMPTY_CLAIMS_BEFORE_GAP = 2

log = logging.getLogger("pgfleet.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"


def notify_gap(empty_in_a_row: int) -> float:
    """How long after a claim a notification may ask for the next, given how many claims in
    a row (that one included) found nothing."""
    return NOTIFY_GAP if empty_in_a_row >= EMPTY_CLAIMS_BEFORE_GAP else 0.0


def over_memory(max_memory: int | None) -> str | None:
    """Why the worker should recycle for its memory use, or None."""
    if not max_memory:
        return None
    with open("/proc/self/statm") as handle:
        rss = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return f"RSS {rss} bytes over max_memory {max_memory}" if rss > max_memory else None


def jittered_limit(max_jobs: int | None) -> int | None:
    # ±10 % so a fleet started together does not recycle together.
    return None if max_jobs is None else max(1, round(max_jobs * random.uniform(0.9, 1.1)))


def _watchdog(leases: Leases, held: Callable[[], int]) -> threading.Event:
    """The lease watchdog, started only by a worker that owns its process, since only such
    a worker may end it: one run on another thread lives in someone else's process (a
    test, an application) and relies on its loop's check."""
    if threading.current_thread() is threading.main_thread():
        return start_watchdog(leases, held)
    return threading.Event()


def _freeze_startup_objects() -> None:
    """Leave the objects that exist once the worker is up (modules, the supervisor's state
    inherited by fork, the task registry) out of every later garbage collection, which
    would otherwise walk them all while claimed jobs wait (tens of milliseconds, early in
    a drain). Only a worker that owns its process does it: freezing is process-wide."""
    if threading.current_thread() is threading.main_thread():
        gc.freeze()


class Worker(ChildProcess):
    def __init__(self, settings: WorkerSettings) -> None:
        super().__init__(settings.beacon)
        self.s = settings
        if not self.s.worker_id:
            self.s.worker_id = default_worker_id()
        self.events = WorkerEvents()
        self.metric = MetricCache()
        self.executor = Executor(queue=settings.queue, worker_id=settings.worker_id,
                                 args_limit=settings.args_limit, wake=self.wakeup.poke,
                                 note_running=self.beacon.running if self.beacon else None)
        self.claims = Claims(settings)
        self.completer = Completer(queue=settings.queue, worker_id=settings.worker_id,
                                   backoff=settings.backoff, executor=self.executor,
                                   metric=self.metric, claims=self.claims)
        self.leases = Leases(worker_id=settings.worker_id, lease=settings.lease,
                             heartbeat_interval=settings.heartbeat_interval,
                             on_give_up=self.beacon.give_up_leases if self.beacon else None)
        self.control = TaskControl(worker_id=settings.worker_id, executor=self.executor,
                                   wake=self.wakeup.poke)
        self.conn: psycopg.Connection[Any] | None = None
        self.listener: Listener | None = None
        self.claim_due = True
        self.next_poll = 0.0
        self.batching = Batching(threads=settings.threads, prefetch=settings.prefetch,
                                 poll_interval=settings.poll_interval)
        # A notification asks for a claim at once, or NOTIFY_GAP after an empty one.
        self.notified = False
        self.next_notified_claim, self.empty_claims = 0.0, 0  # empty claims in a row
        self.recycle_reason: str | None = None
        self.exit_code = EXIT_OK
        self.job_limit = jittered_limit(settings.max_jobs)
        self.display = BusyDisplay(settings.queue, settings.title)
        self.abandoned = False  # set when the process must exit without the database
        self.stuck: set[int] = set()  # jobs that ignored their timeout: never released here
        # Jobs claimed again while an old run of theirs, whose hold the database lost, still
        # went on here: held (and renewed) under the new claim, started once that run ended.
        self.deferred: dict[int, store.ClaimedJob] = {}

    @property
    def running(self) -> dict[int, Running]:
        """The jobs held, by id: claimed, running or awaiting their commit."""
        return self.executor.running

    # ---- lifecycle -------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        if not self._connect_first():
            return _stopped_before_connecting(self)
        publish_defaults(self.conn, self.s.defaults, self.s.dsn)
        self.executor.start(self.s.threads)
        watchdog = _watchdog(self.leases, lambda: len(self.running))
        _freeze_startup_objects()
        if self.s.notify:
            self.listener = Listener(self.s.dsn, self._on_notify,
                                     on_cancel=self.control.on_cancel)
            self.listener.start()
        metrics.workers.labels(self.s.queue).inc()
        metrics.zero_worker_counters(self.s.queue, self.s.registry.names())
        log.info("worker %s started on queue %r (threads=%d, notify=%s%s)",
                 self.s.worker_id, self.s.queue, self.s.threads, self.s.notify,
                 f", flow control: {flow.describe(self.s.flow)}" if self.s.flow else "")
        self.events.started.set()
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
            _shut_down(self)
            watchdog.set()
            if threading.current_thread() is threading.main_thread():
                # A stuck job's processes must not outlive this process, which may end
                # by sys.exit (`pgfleet worker`) rather than pgfleet.runtime.child.exit_now.
                kill_job_processes()
        return self.exit_code

    def _loop(self) -> None:
        while True:
            now = time.monotonic()
            self.busy = len(self.running)
            self.batching.auto.holding(self.busy, now)
            self.beat()
            if self.parent_gone() and self.stop_mode != "quick":
                log.warning("parent process died; stopping")
                self.request_stop("quick")
            self.completer.collect()
            self._enforce_timeouts(now)
            if self.leases.expiring(now, len(self.running)):
                self._leases_expiring(now)
            if self._done(now):
                if self.stop_mode is None:
                    self.exit_code = EXIT_RECYCLE
                    log.info("worker %s recycling: %s", self.s.worker_id, self.recycle_reason)
                return
            self._database_phase(now)
            self.display.show(len(self.running),
                              self.beacon.peers() if self.beacon is not None else 0)
            if not self._done(time.monotonic()):
                self.wakeup.wait(self._wait_time())

    def _done(self, now: float) -> bool:
        """Stopped, or recycling with no job left."""
        if self.stop_mode == "quick":
            return True
        if self.stop_mode == "graceful":
            return not self.running or now >= self.stop_requested_at + self.s.shutdown_timeout
        return bool(self.recycle_reason) and not self.running

    def _wait_time(self) -> float:
        # Wake at least every BEAT_EVERY to beat, notice a dead parent, enforce timeouts.
        horizon = min(self.next_poll, self.leases.next_renewal)
        if self.notified:
            horizon = min(horizon, self.next_notified_claim)
        horizon = min(horizon, self.control.wait_limit())
        if self.completer.pending:
            horizon = min(horizon, self.completer.since + FLUSH_DELAY)
        if self.conn is None:
            horizon = self.reconnect.not_before
        return max(0.0, min(horizon - time.monotonic(), BEAT_EVERY))

    # ---- database ----------------------------------------------------------------------

    def _database_phase(self, now: float) -> None:
        """Flush, heartbeat and claim. A failure drops the connection and schedules the
        next attempt with backoff; it never blocks the loop beyond a connect."""
        if self.conn is None and not self.reconnect.due(now):
            return
        try:
            if self.conn is None or self.conn.closed:
                self._connect()
            self._flush()
            _start_deferred(self)
            if self.stop_mode == "graceful":
                _withdraw_waiting(self)
            elif (self.executor.unreturned or self.batching.held_too_long(
                    len(self.running) - len(self.completer.pending), now)):
                _withdraw_waiting(self, keep=self.s.threads + self.batching.prefetch())
            if self.leases.due(now):
                self._renew()
            self.control.database_work(self.conn, now)
            limit = self._claim_limit(now)
            if limit > 0:
                self._claim(limit)
        except (psycopg.OperationalError, DatabaseUnavailable) as exc:
            self._connection_lost(exc)
            return
        if self.reconnect.succeeded():
            log.info("worker %s reconnected", self.s.worker_id)

    def _connect_first(self) -> bool:
        """Wait for the database with backoff, beating meanwhile; False if told to stop."""
        while True:
            try:
                self._connect()
                self.reconnect.succeeded()
                return True
            except (DatabaseUnavailable, psycopg.OperationalError) as exc:
                delay = self.reconnect.failed()  # each new error once, not every retry
                self.reconnect.report(log, f"worker {self.s.worker_id}",
                                      first_line(exc, self.s.dsn), delay)
                self._drop_connection()
            if not self.pause(delay) or self.parent_gone():
                return False

    def _connect(self) -> None:
        with self.beating():
            self.conn = connect(self.s.dsn, autocommit=True, process=True)
        fleet_store.register_process(
            self.conn, id=self.s.worker_id, host=socket.gethostname(), pid=os.getpid(),
            kind="worker", queue=self.s.queue, supervisor=self.s.supervisor_id,
        )
        self.claims.connected(self.conn)
        # Rows written with triggers off lowered no head: this claim would never reach them
        # (a worker may run without a supervisor's maintenance).
        fleet_store.find_heads(self.conn)
        self.claim_due = True  # a reconnect may have missed notifications: poll at once
        # Renew before any claim: a job the database lost (a failover) is found lost, and
        # stopped, before a claim could be offered it again.
        self.leases.next_renewal = 0.0
        self.events.connects += 1
        self.executor.gate.set()

    def _drop_connection(self) -> None:
        self.executor.gate.clear()  # jobs not started yet wait for the database
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self.conn = None

    def _connection_lost(self, exc: BaseException) -> None:
        delay = self.reconnect.failed()
        self.reconnect.report(log, f"worker {self.s.worker_id} lost its database connection",
                              first_line(exc, self.s.dsn), delay)
        self._drop_connection()

    def _claim_limit(self, now: float, freeing: int = 0) -> int:
        """How many jobs to claim now; 0: no claim. The one rule for a claim alone and for
        one joined to a flush, whose `freeing` outcomes each give a slot back.

        No claim while stopping or recycling, nor with a timed-out job's outcome (the
        abandon path flushes it just before the process exits), nor once the outcomes
        bring the worker to max_jobs, nor while a run whose job was lost may go on: the
        database may have gone back in time (a failover) and offer that very job again.
        Otherwise a claim is due (a poll, a notification, a reconnect); under flow
        control also whenever outcomes free slots of the limit this worker held, or a
        full queue would idle until the next poll."""
        if (self.stop_mode or self.recycle_reason or self.completer.any_timed_out()
                or self.executor.lost_runs()):
            return 0
        wanted = (self.claim_due or now >= self.next_poll
                  or (self.notified and now >= self.next_notified_claim))
        if not wanted and not (freeing and self.s.flow is not None):
            return 0
        # Under flow control a prefetched job would hold a slot of the limit idle.
        room = self.s.threads if self.claims.limited else self.batching.capacity()
        if self.job_limit is not None:  # a recycling worker takes no job past max_jobs
            if self.completer.jobs_done + freeing >= self.job_limit:
                return 0
            room = min(room, self.job_limit - self.completer.jobs_done)
        return max(0, room - (len(self.running) - freeing))

    def _claim(self, limit: int) -> None:
        assert self.conn is not None
        start = time.monotonic()
        after = self.batching.cursor.start(start, self.notified)
        self.notified = False  # before the claim: one arriving during it asks for another
        held, held_solo = self.completer.held_besides([])
        jobs = self.claims(self.conn, limit, held=held, held_solo=held_solo, after=after)
        self.batching.auto.round_trip(time.monotonic() - start)
        _hand_out(self, jobs, limit)

    def _flush(self) -> None:
        """Commit the collected outcomes; the claim joins their transaction when
        _claim_limit allows one (one commit, one WAL flush, for both)."""
        pending = len(self.completer.pending)
        if not pending or self.conn is None:
            return
        start = time.monotonic()
        if (self.stop_mode is None and not self.recycle_reason
                and not self.completer.any_timed_out()
                and self.batching.may_defer(pending=pending, waiting=self.executor.todo.qsize(),
                                            since=self.completer.since, now=start)):
            return
        _write_last_progress(self, self.conn)
        limit = self._claim_limit(time.monotonic(), freeing=pending)
        claim = limit > 0
        after = None
        if claim:
            after = self.batching.cursor.start(start, self.notified)
            self.notified = False
        flushed = self.completer.flush(self.conn, claim_limit=limit if claim else 0,
                                       lease=self.s.lease, after=after)
        self.batching.auto.round_trip(time.monotonic() - start)
        self.batching.auto.jobs_ran(flushed.job_seconds)
        self.events.completed += flushed.committed
        if self.job_limit is not None and self.completer.jobs_done >= self.job_limit:
            self.recycle_reason = self.recycle_reason or f"{self.completer.jobs_done} jobs done"
        if flushed.claimed is not None:
            # After the accounting: a failed job requeued without delay can come back in
            # this very claim, under the same id.
            _hand_out(self, flushed.claimed, flushed.claim_limit)

    def _renew(self) -> None:
        assert self.conn is not None
        self.leases.renew(self.conn, self.executor,
                          also={job.id: job.fence for job in self.deferred.values()})
        if self.beacon is not None:  # for the keeper (pgfleet.runtime.keeper)
            self.beacon.leases_renewed(self.leases.renewed)
        self.recycle_reason = self.recycle_reason or over_memory(self.s.max_memory)

    # ---- timeouts and leases, with or without the database ---------------------------------

    def _enforce_timeouts(self, now: float) -> None:
        late, stuck = self.executor.overdue(now, self.s.kill_grace)
        for running in late:
            self.executor.interrupt(running)
            self.events.timeouts += not running.control.cancelled  # cancels are no timeouts
        for running in stuck:
            self._abandon(running)

    def _abandon(self, running: Running) -> None:
        """The job ignored the interrupt: exit so the supervisor starts a fresh process.
        Its thread may still run, so nothing records it here: the job stays leased until
        this process is gone, then the supervisor's rescue (after waitpid) or the lease
        expiry records the attempt."""
        log.error("job %d did not stop within kill_grace; exiting the worker",
                  running.job.id)
        self.stuck.add(running.job.id)
        self.exit_code = EXIT_TIMEOUT
        self.stop_mode = "quick"

    def _leases_expiring(self, now: float) -> None:
        """The database has been out of reach for most of a lease. Past expiry another
        host may start these jobs, so this process must not be running them then: it
        exits, and the supervisor's rescue gives them back refunded, not as crashed (the
        beacon mark set by Leases.give_up says the exit was chosen), or the lease expiry
        does for a worker with no supervisor."""
        self.leases.give_up(now, len(self.running))
        self.exit_code = EXIT_LEASE_LOST
        self.stop_mode = "quick"
        self.abandoned = True
        if self.reconnect.last_error:
            log.error("worker %s: last database error: %s", self.s.worker_id,
                      self.reconnect.last_error)

    # ---- wake-ups and the process title --------------------------------------------------

    def _on_notify(self, queue: str) -> None:
        if queue in (self.s.queue, WAKE_ALL) and not self.notified:
            self.notified = True
            self.wakeup.poke()


def _write_last_progress(worker: Worker, conn: psycopg.Connection[Any]) -> None:
    """A report made in a task's last second is still unwritten: it goes before the
    outcome, while the job is running (the write is fenced on that), in a round trip of
    its own that only tasks which report progress pay."""
    store.write_progress(conn, worker=worker.s.worker_id,
                         reports=last_progress(worker.completer.pending))


def _withdraw_waiting(worker: Worker, keep: int = 0) -> None:
    """Give back, uncharged, the jobs claimed ahead that no thread has started (all but
    `keep`), for other workers to run now. A graceful stop gives back all of them: they
    would otherwise hold the stop (and the deploy) for up to shutdown_timeout. prefetch
    auto gives back those it no longer wants (Batching.held_too_long). Retried on the next
    pass if the database is away."""
    assert worker.conn is not None
    ids = worker.executor.withdraw_waiting(keep)
    if not ids:
        return
    back = store.withdraw(worker.conn, worker=worker.s.worker_id, fences=_fences(worker, ids))
    log.info("withdrew %d job(s) no thread had started: %s", len(back), back)
    for job_id in ids:
        worker.executor.release(job_id)


def _fences(worker: Worker, ids: Iterable[int]) -> dict[int, int]:
    """{id: fence} of the jobs `ids` this worker runs, in id order."""
    return {job_id: worker.running[job_id].job.fence for job_id in sorted(ids)
            if job_id in worker.running}


def _without_runs_going_on(worker: Worker, jobs: list[store.ClaimedJob]
                           ) -> list[store.ClaimedJob]:
    """The claimed jobs that no thread of this worker runs already. The database offered
    a job this worker still runs only if it lost that hold (a failover rewound the row):
    the old run is stopped, and the new claim is held (and renewed) until that run has
    ended, then started (_start_deferred); no claim follows meanwhile (_claim_limit)."""
    again = [job for job in jobs if job.id in worker.running]
    if not again:
        return jobs
    for job in again:
        log.warning("job %d was claimed again while this worker still runs it: the database"
                    " lost this worker's claim (a failover?); it starts again once the old"
                    " run has stopped", job.id)
        worker.executor.interrupt(worker.running[job.id], LeaseLost)
        worker.deferred[job.id] = job
    return [job for job in jobs if job.id not in worker.deferred]


def _start_deferred(worker: Worker) -> None:
    """Start the jobs held back by _without_runs_going_on whose old run has ended."""
    ready = [job for job_id, job in worker.deferred.items() if job_id not in worker.running]
    for job in ready:
        del worker.deferred[job.id]
    if ready:
        _admit(worker, ready)


def _hand_out(worker: Worker, jobs: list[store.ClaimedJob], limit: int) -> None:
    """Give claimed jobs to the executor threads."""
    # A full batch suggests more are waiting: claim again as soon as a slot frees.
    worker.claim_due = claim_full(jobs, limit)
    worker.batching.cursor.claimed(jobs, limit)
    worker.batching.auto.jobs_claimed(sum(job.args_size for job in jobs), len(jobs))
    now = time.monotonic()
    worker.next_poll = now + worker.s.poll_interval
    worker.empty_claims = 0 if jobs else worker.empty_claims + 1
    worker.next_notified_claim = now + notify_gap(worker.empty_claims)
    worker.events.polls += 1
    jobs = _without_runs_going_on(worker, jobs)
    if jobs:
        _admit(worker, jobs)


def _admit(worker: Worker, jobs: list[store.ClaimedJob]) -> None:
    """Give claimed jobs to the executor threads."""
    # The bookkeeping goes before the jobs: a job's thread cannot start it before this
    # thread lets go of the GIL (its next wait), so what this thread does after the first
    # job is queued delays that job.
    admitted = [worker.executor.admit(job, worker.s.registry, worker.s.timeout)
                for job in jobs]
    metrics.observe_many(worker.metric(metrics.job_wait, worker.s.queue),
                         [max(0.0, job.wait_seconds) for job in jobs])
    for label, count in Counter(running.label for running in admitted).items():
        worker.metric(metrics.jobs_started, worker.s.queue, label).inc(count)
    # The keeper must know of the jobs before a thread can start one.
    worker.busy = len(worker.running)
    worker.beat()
    for running in admitted:
        worker.executor.hand(running)


def _stopped_before_connecting(worker: Worker) -> int:
    """Stopped while it waited for the database: it claimed nothing, so there is nothing
    to give back, and the supervisor's stop need not wait for the database (nor report
    jobs left to their lease)."""
    if worker.beacon is not None:
        worker.beacon.held_nothing()
    return worker.exit_code


def _shut_down(worker: Worker) -> None:
    """Stop the job threads, then release only what is known stopped: outcomes are
    committed, interrupted jobs given back. A job whose thread may still run stays
    leased; it is returned once this process is gone (supervisor's rescue after
    waitpid, or the lease expiry)."""
    if worker.listener is not None:
        worker.listener.stop()
    if worker.abandoned:
        log.info("worker %s stopped without the database", worker.s.worker_id)
        worker._drop_connection()
        return
    withdrawn, stopped = _stop_jobs(worker)
    recorded = False
    try:
        if worker.conn is None or worker.conn.closed:
            worker._connect()
        assert worker.conn is not None
        worker._flush()
        if worker.deferred:
            store.withdraw(worker.conn, worker=worker.s.worker_id,
                           fences={job.id: job.fence for job in worker.deferred.values()})
            worker.deferred.clear()
        if withdrawn:
            ids = store.withdraw(worker.conn, worker=worker.s.worker_id,
                                 fences=_fences(worker, withdrawn))
            log.info("withdrew %d job(s) no thread had started: %s", len(ids), ids)
        if stopped:
            ids = store.give_back(worker.conn, worker=worker.s.worker_id,
                                  fences=_fences(worker, stopped))
            if ids:
                log.info("gave back %d unfinished job(s): %s", len(ids), ids)
        for job_id in withdrawn | stopped:
            worker.executor.release(job_id)
        worker.busy = len(worker.running)  # the keeper holds it to no lease it gave back
        worker.beat()
        if worker.running:
            log.warning("left %d job(s) leased, their threads still running: %s; they "
                        "are returned once this process is gone", len(worker.running),
                        sorted(worker.running))
        else:
            fleet_store.unregister_process(worker.conn, worker.s.worker_id)
            recorded = True
    except (psycopg.Error, DatabaseUnavailable) as exc:
        log.warning("could not record the shutdown: %s", scrub(str(exc), worker.s.dsn))
    finally:
        worker._drop_connection()
    if not recorded and worker.beacon is not None:
        if worker.claims.sent:
            # Jobs may be left leased to this process: the supervisor has them given back
            # refunded once it is gone, as a stop's and not as a crash's.
            worker.beacon.give_up_leases()
        else:
            # Connected, but the database went away before any claim: nothing to give
            # back (as _stopped_before_connecting).
            worker.beacon.held_nothing()
    worker.executor.stop()
    worker.events.stopped.set()
    log.info("worker %s stopped", worker.s.worker_id)


def _stop_jobs(worker: Worker) -> tuple[set[int], set[int]]:
    """Withdraw the jobs no thread has started, interrupt the running ones and wait
    for their threads to leave them: up to kill_grace, and never past most of the
    lease. Returns the ids withdrawn, and those known stopped without an outcome worth
    recording (to give back); the other outcomes stay pending for the flush."""
    withdrawn = worker.executor.withdraw_waiting()
    stopped = set(withdrawn)
    for job_id, running in worker.running.items():
        if job_id not in stopped and job_id not in worker.stuck:
            worker.executor.interrupt(running, WorkerStopping)
    now = time.monotonic()
    deadline = min(now + worker.s.kill_grace,
                   worker.leases.renewed + worker.s.lease * LEASE_SAFETY)
    while True:
        worker.completer.collect()
        ended = {o.running.job.id for o in worker.completer.pending}
        waiting = set(worker.running) - ended - stopped - worker.stuck
        if not waiting or time.monotonic() >= deadline:
            break
        worker.beat()
        worker.wakeup.wait(min(BEAT_EVERY, max(0.0, deadline - time.monotonic())))
    # A withdrawn job's LeaseLost outcome is no failure; an interrupted one is given back.
    stopped |= {o.running.job.id for o in worker.completer.pending if o.stopped}
    worker.completer.pending = [o for o in worker.completer.pending
                              if o.running.job.id not in stopped]
    return withdrawn, stopped - withdrawn
