"""The maintenance process: gives back jobs of dead workers, prunes finished jobs,
heartbeats the supervisor's row and counts enqueued jobs for the metrics (the queue gauges
are read by the exporter at scrape time: pgfleet/exporter/database.py)."""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import datetime
from typing import Any

import psycopg

from pgfleet import metrics
from pgfleet.config import Config, QueueConfig
from pgfleet.core import flow
from pgfleet.core.backoff import Backoff
from pgfleet.errors import DatabaseUnavailable
from pgfleet.maintenance.lease_watch import LeaseWatch
from pgfleet.runtime.beacon import Beacon
from pgfleet.runtime.child import BEAT_EVERY
from pgfleet.runtime.db_child import DatabaseChild
from pgfleet.runtime.exit_codes import EXIT_OK, EXIT_RESCUE_FAILED
from pgfleet.runtime.failed_queues import UNREAD, FailedQueues
from pgfleet.runtime.rescue_pipe import RescueReader, RescueRequest
from pgfleet.sql import fleet as fleet_store, rescue as rescue_store, store
from pgfleet.sql.db import first_line, scrub

log = logging.getLogger("pgfleet.maintenance.process")

RESCUE_BATCH = 1000
PRUNE_EVERY = 60.0


class Maintenance(DatabaseChild):
    def __init__(self, config: Config, dsn: str, *, supervisor_id: str, supervisor_pid: int,
                 rescue_fd: int, beacon: Beacon | None, own_id: str = "",
                 failed_queues: FailedQueues | None = None) -> None:
        super().__init__(dsn, beacon)
        self.config = config
        self.supervisor_id = supervisor_id
        self.supervisor_pid = supervisor_pid
        self.own_id = own_id or f"{socket.gethostname()}:{os.getpid()}:maintenance"
        self.rescue = RescueReader(rescue_fd)
        self.to_rescue: list[RescueRequest] = []
        self.next_prune = 0.0
        self.next_heartbeat = 0.0
        self.seen_job_id: int | None = None
        self.failed_queues = failed_queues
        self.reported_failures = UNREAD  # the sequence of the failed queues last recorded
        self.lease_watch = LeaseWatch(config.supervisor.lease)
        # When the claims resume after a database change, as last read; None: not held.
        self.claims_resume_at: datetime | None = None

    def run(self) -> int:
        metrics.zero_maintenance_counters(list(self.config.queues))
        while not self.stopping and not self.parent_gone():
            self.beat()
            self.read_requests(self.config.maintenance.interval)
            try:
                self.pass_once()
            except (psycopg.Error, DatabaseUnavailable) as exc:
                self.drop_connection()
                # What the watch saw before the database went away proves nothing about
                # the holders: no worker could renew meanwhile, and each one's own
                # supervisor gives its jobs back (refunded) once it is back. A lease must
                # again be seen unrenewed for a whole lease after the outage.
                self.lease_watch.forget()
                delay = self.reconnect.failed()
                self.reconnect.report(log, "maintenance pass failed",
                                      first_line(exc, self.dsn), delay)
                # Beating while it waits: an outage must not look like a frozen process.
                self.pause(delay)
                continue
            if self.reconnect.succeeded():
                log.info("maintenance reconnected to the database")
        # Last requests (a worker killed during shutdown) are still honoured.
        self.read_requests(0.0)
        rescued = self._final_rescue()
        self._unregister()
        return EXIT_OK if rescued else EXIT_RESCUE_FAILED

    def _final_rescue(self) -> bool:
        """Give back what the stopped workers held, waiting for the database while it is
        away: a job left leased is rescued by a lease watch only after a whole lease, and
        charged, so prefetched jobs that never ran could end dead after a stop during an
        outage. Waits up to a lease; the supervisor's stop deadline may
        end this process first. False if the jobs were not given back."""
        until = time.monotonic() + self.config.supervisor.lease
        while True:
            try:
                self._rescue_requested()
                return True
            except (psycopg.Error, DatabaseUnavailable) as exc:
                self.drop_connection()
                left = until - time.monotonic()
                if left <= 0 or self.parent_gone():
                    log.warning("final rescue failed: %s; the jobs of %d stopped worker(s) "
                                "wait for their lease", scrub(str(exc).strip(), self.dsn),
                                len(self.to_rescue))
                    return False
                delay = min(self.reconnect.failed(), left)
                self.reconnect.report(log, "final rescue failed", first_line(exc, self.dsn),
                                      delay)
                self._sleep_beating(delay)

    def _sleep_beating(self, seconds: float) -> None:
        """Wait `seconds`, beating; unlike pause(), also while stopping."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not self.parent_gone():
            self.beat()
            self.wakeup.wait(min(left, BEAT_EVERY))

    def read_requests(self, wait: float) -> None:
        """Wait up to `wait` seconds (beating) for the arbiter to name dead workers on the
        rescue pipe; returns as soon as some are named, or when stopped."""
        deadline = time.monotonic() + wait
        while True:
            self.beat()
            left = deadline - time.monotonic()
            if self.wakeup.wait(min(max(left, 0.0), BEAT_EVERY), self.rescue.fd):
                self.to_rescue.extend(self.rescue.read())
                return
            if left <= BEAT_EVERY or self.stopping or self.parent_gone():
                return

    def on_connect(self, conn: psycopg.Connection[Any]) -> None:
        """Write this config's flow control of its queues to the database: at start, on
        every reconnect, and after a HUP (which starts a new maintenance process). The
        master holds no connection, so its maintenance child does this for it."""
        limits = {name: queue.flow_limits() for name, queue in self.config.queues.items()}
        fleet_store.publish_limits(conn, published_by=self.supervisor_id, limits=limits)
        for name, found in sorted(limits.items()):
            if found is not None:
                log.info("queue %r flow control published: %s", name, flow.describe(found))

    def pass_once(self) -> None:
        """One maintenance pass: rescue, heartbeat, move the claims' heads, rescue expired
        leases, prune, measure."""
        conn = self.connection()
        self._rescue_requested()
        now = time.monotonic()
        if now >= self.next_heartbeat:
            self._heartbeat(conn)
            self.next_heartbeat = now + self.config.supervisor.heartbeat_interval
            self.reported_failures = UNREAD  # the row may have been made again: rewrite
        self._report_failures(conn)
        self._check_epoch(conn)
        fleet_store.move_heads(conn)
        self._rescue_stale(conn)
        if now >= self.next_prune:
            if made := fleet_store.find_heads(conn):
                log.warning("%d queue/priority pair(s) had waiting jobs before their head or no"
                            " head (written with triggers off?); their claims reach them now",
                            made)
            self._prune(conn)
            self.next_prune = now + PRUNE_EVERY
        self._measure(conn)

    def _check_epoch(self, conn: psycopg.Connection[Any]) -> None:
        """Notice a database that changed under the fleet (the claims notice it too, and
        hold themselves back); say so once when the hold starts and once when it ends."""
        resume = fleet_store.epoch_check(conn, lease=self.config.supervisor.lease)
        left = 0.0
        if resume is not None:
            left = max(0.0, (resume - fleet_store.db_now(conn)).total_seconds())
            if resume != self.claims_resume_at:
                log.warning("the database changed under the fleet (a failover to a replica or"
                            " a restore: its WAL timeline or system identifier is new); no"
                            " job starts for %.0fs, until every lease granted before has"
                            " expired, so no run the old database knew of overlaps another",
                            left)
        elif self.claims_resume_at is not None:
            log.info("claims resumed after the database change")
        self.claims_resume_at = resume
        metrics.claims_held.set(left)

    def _rescue_stale(self, conn: psycopg.Connection[Any]) -> None:
        """Rescue the jobs whose lease nobody renewed for a whole lease, as timed by this
        process's monotonic clock (maintenance/lease_watch.py): a host that vanished or froze."""
        stale = self.lease_watch.stale(rescue_store.running_leases(conn), time.monotonic())
        for job_id, queue, state in rescue_store.rescue_stale(conn, leases=stale[:RESCUE_BATCH]):
            metrics.jobs_rescued.labels(metrics.queue_label(queue)).inc()
            _log_rescue(job_id, queue, state, "its lease was not renewed for a whole lease")

    def _rescue_requested(self) -> None:
        if not self.to_rescue:
            return
        conn = self.connection()
        while self.to_rescue:
            worker, reason, running, gave_up = self.to_rescue[0]
            if gave_up:
                self._rescue_gave_up(conn, worker, reason, running)
                fleet_store.unregister_process(conn, worker)
                self.to_rescue.pop(0)
                continue
            held = rescue_store.held_by(conn, worker=worker)
            # Only a job whose task code was running can have killed the process; the
            # others (claimed ahead, or done and not yet committed) get their attempt
            # back. `running` None: not known, every held job counts as running.
            suspects = [j for j in held if running is None or j.id in running]
            # Several running when it died of its own fault (a signal such as SIGSEGV, an
            # exit): any of them may be the culprit, so none is charged; each runs alone
            # next, where a crash names its culprit. SIGKILL comes from outside (an
            # operator, the supervisor, the OOM killer): every running job is charged, and
            # none is made to run alone.
            shared = len(suspects) > 1 and not reason.endswith("SIGKILL")
            rows = rescue_store.rescue_holder(conn, worker=worker, error=reason,
                                       delays=self._retry_delays(held), shared=shared,
                                       running=running)
            for rescued in rows:
                label = metrics.queue_label(rescued.queue)
                metrics.jobs_rescued.labels(label).inc()
                if not rescued.ran:
                    _log_rescue(rescued.id, rescued.queue, rescued.state,
                                f"worker {worker} exited ({reason}) before running it")
                    continue
                task = metrics.task_label(rescued.task)
                metrics.jobs_finished.labels(label, task, "crashed").inc()
                if rescued.state == "dead":
                    metrics.jobs_finished.labels(label, task, "dead").inc()
                _log_rescue(rescued.id, rescued.queue, rescued.state,
                            f"worker {worker} exited ({reason})")
            fleet_store.unregister_process(conn, worker)
            self.to_rescue.pop(0)

    def _rescue_gave_up(self, conn: psycopg.Connection[Any], worker: str, reason: str,
                        running: list[int] | None) -> None:
        """The worker exited on purpose with jobs still leased to it (it could not renew
        its leases, or its stop ended before their threads did): they go back like a
        stopping worker's, refunded and not crashed (rescue_gave_up)."""
        for rescued in rescue_store.rescue_gave_up(conn, worker=worker, error=reason,
                                                   running=running):
            label = metrics.queue_label(rescued.queue)
            metrics.jobs_rescued.labels(label).inc()
            if rescued.state == "dead":
                metrics.jobs_finished.labels(label, metrics.task_label(rescued.task),
                                             "dead").inc()
            _log_rescue(rescued.id, rescued.queue, rescued.state,
                        f"worker {worker} exited: {reason.removeprefix('given back: the worker ')}"
                        + ("" if rescued.ran else " (it had not run this job)"))

    def _retry_delays(self, held: list[store.HeldJob]) -> dict[int, float]:
        """A crashed attempt is due again after the backoff a failed one would get: the
        task's own (published by the workers, which import it: pgfleet.worker.defaults), else
        its queue's."""
        return {job.id: self._backoff(job).delay(max(job.attempt, 1)) for job in held}

    def _backoff(self, job: store.HeldJob) -> Backoff:
        if job.task_backoff:
            try:
                return Backoff(**job.task_backoff)
            except (TypeError, ValueError):
                log.warning("job %d: unusable published task backoff %r; using its "
                            "queue's", job.id, job.task_backoff)
        return (self.config.queues.get(job.queue) or QueueConfig()).backoff.to_backoff()

    def _heartbeat(self, conn: psycopg.Connection[Any]) -> None:
        fleet_store.register_process(
            conn, id=self.supervisor_id, host=socket.gethostname(), pid=self.supervisor_pid,
            kind="supervisor", queue=None, supervisor=None,
        )
        fleet_store.register_process(
            conn, id=self.own_id, host=socket.gethostname(), pid=os.getpid(),
            kind="maintenance", queue=None, supervisor=self.supervisor_id,
        )
        fleet_store.prune_processes(conn, self.config.supervisor.stale_after * 4)

    def _report_failures(self, conn: psycopg.Connection[Any]) -> None:
        """Record the arbiter's failed queues on the supervisor's row when they changed
        (and after each heartbeat: an UPDATE that finds them equal writes nothing)."""
        if self.failed_queues is None:
            return
        sequence, failed = self.failed_queues.read()
        if sequence not in (self.reported_failures, UNREAD):
            fleet_store.report_failed_queues(conn, id=self.supervisor_id, failed=failed)
            self.reported_failures = sequence

    def _prune(self, conn: psycopg.Connection[Any]) -> None:
        total = 0
        while True:
            removed = store.prune_finished(
                conn, retention=self.config.maintenance.retention,
                limit=self.config.maintenance.prune_batch,
            )
            total += removed
            if removed < self.config.maintenance.prune_batch or self.stopping:
                break
        if total:
            log.info("pruned %d finished job(s)", total)

    def _measure(self, conn: psycopg.Connection[Any]) -> None:
        if self.seen_job_id is None:
            self.seen_job_id = fleet_store.max_job_id(conn)  # the counter starts at boot
        created, self.seen_job_id = fleet_store.jobs_created_since(conn, self.seen_job_id)
        for queue, count in created.items():
            metrics.jobs_enqueued.labels(metrics.queue_label(queue)).inc(count)

    def _unregister(self) -> None:
        try:
            conn = self.connection()
            fleet_store.unregister_process(conn, self.supervisor_id)
            fleet_store.unregister_process(conn, self.own_id)
        except (psycopg.Error, DatabaseUnavailable):
            pass
        finally:
            self.drop_connection()


def _log_rescue(job_id: int, queue: str, state: str, why: str) -> None:
    """A rescued job: WARNING when it will run again, ERROR when that was its last attempt."""
    level = logging.ERROR if state == "dead" else logging.WARNING
    after = "the job is dead" if state == "dead" else f"now {state}"
    log.log(level, "job %d (queue %r) rescued: %s; %s", job_id, queue, why, after,
            extra={"event": "job_rescued", "job_id": job_id, "queue": queue, "state": state,
                   "reason": why})
