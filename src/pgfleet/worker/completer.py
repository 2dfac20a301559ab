"""The completer: outcomes waiting to be committed, the fenced completion (only the
holder at the job's attempt may record it), and the claim fused into the completion's
commit. A job's slot is freed only once its outcome is committed."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg

from pgfleet import metrics
from pgfleet.core.backoff import Backoff
from pgfleet.sql import store
from pgfleet.worker.claims import Claims
from pgfleet.worker.executor import Executor, Outcome
from pgfleet.worker.job_log import attempt_failed, lease_lost

# Snoozes one job may take without spending attempts; past it a snooze spends one, so a
# task that always snoozes still ends (after MAX_SNOOZES + max_attempts runs).
MAX_SNOOZES = 100


def ended(outcome: Outcome) -> str:
    """How the attempt ended, as recorded: cancelled, snoozed, failed or succeeded."""
    if outcome.cancelled:
        return "cancelled"
    if outcome.snooze is not None:
        return "snoozed"
    return "failed" if outcome.error is not None else "succeeded"


def complete(conn: psycopg.Connection[Any], worker: str, batch: list[Outcome],
             backoff: Backoff) -> tuple[set[int], dict[int, store.JobState]]:
    """Record a batch's outcomes, fenced: the ids still held among successes,
    cancellations and snoozes, and the new states of failures (`backoff` unless the task
    has its own or raised Retry). Cancellations and snoozes are rare: their statements run
    only when the batch has some. Shared by the worker and pgfleet.testing.run_jobs."""
    successes = [o for o in batch if ended(o) == "succeeded"]
    held = store.complete_succeeded(
        conn, worker=worker, done=[(o.running.job.id, o.running.job.fence)
                                   for o in successes],
        results=[o.result for o in successes])
    held |= store.complete_cancelled(conn, worker=worker, done=[
        (o.running.job.id, o.running.job.fence) for o in batch
        if ended(o) == "cancelled"])
    snoozes = [o for o in batch if ended(o) == "snoozed"]
    if snoozes:
        snoozed = store.complete_snoozed(conn, worker=worker, done=[
            (o.running.job.id, o.running.job.fence, o.snooze or 0.0) for o in snoozes],
            max_snoozes=MAX_SNOOZES)
        held |= snoozed
        for o in snoozes:
            if o.running.job.id not in snoozed:  # past MAX_SNOOZES: spends an attempt
                o.error = f"snoozed {MAX_SNOOZES} times already: this snooze spends an attempt"
                o.retry_delay, o.snooze = o.snooze, None
    failures = [_failure(o, backoff) for o in batch if ended(o) == "failed"]
    return held, store.complete_failed(conn, worker=worker, failures=failures)


def _failure(outcome: Outcome, default_backoff: Backoff) -> store.Failure:
    job = outcome.running.job
    task = outcome.running.task
    backoff = (task.backoff if task and task.backoff else None) or default_backoff
    delay = backoff.delay(job.attempt) if outcome.retry_delay is None else outcome.retry_delay
    return store.Failure(id=job.id, fence=job.fence, error=outcome.error or "",
                         delay=delay, final=outcome.final)


class MetricCache:
    """Labelled children of metrics, cached: .labels() costs a lock and a lookup, and the
    worker moves counters for every job."""

    def __init__(self) -> None:
        self.children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def __call__(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = metric.labels(*labels)
        return child


@dataclass
class Flushed:
    """What one flush did: outcomes committed, and the jobs claimed in the same commit
    (None when no claim joined it)."""

    committed: int
    claimed: list[store.ClaimedJob] | None
    claim_limit: int
    job_seconds: list[float]  # run time of each job of the batch


class Completer:
    def __init__(self, *, queue: str, worker_id: str, backoff: Backoff,
                 executor: Executor, metric: MetricCache, claims: Claims) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.backoff = backoff
        self.executor = executor
        self.metric = metric
        self.claims = claims
        self.pending: list[Outcome] = []  # outcomes not yet committed
        self.since = 0.0  # when the oldest pending outcome was collected
        self.jobs_done = 0

    def collect(self) -> None:
        found = self.executor.finished()
        if found and not self.pending:
            self.since = time.monotonic()
        self.pending.extend(found)

    def add(self, outcome: Outcome) -> None:
        self.pending.append(outcome)

    def flush(self, conn: psycopg.Connection[Any], *, claim_limit: int,
              lease: float, after: store.ClaimKey | None = None) -> Flushed:
        """Commit every pending outcome in at most two statements. With claim_limit > 0
        the claim joins the completions' transaction: one commit (one WAL flush) instead
        of two per batch."""
        batch = self.pending
        if not batch:
            return Flushed(0, None, 0, [])
        claimed: list[store.ClaimedJob] | None = None
        states: dict[int, store.JobState]
        claim_error: psycopg.Error | None = None
        if claim_limit > 0:
            try:
                done, states, claimed = self._complete_and_claim(
                    conn, batch, claim_limit=claim_limit, lease=lease, after=after)
            except psycopg.errors.LockNotAvailable:
                # The queue's flow-control lock is held by a session that stopped talking:
                # the completions commit alone, and the worker claims again later.
                metrics.claim_lock_timeouts.labels(self.queue).inc()
                done, states = self._complete(conn, batch)
            except psycopg.Error as exc:
                if isinstance(exc, psycopg.OperationalError) or conn.closed:
                    raise
                # The claim failed on a row it reached, and took the completions of its
                # statement down with it. Commit them alone first: jobs that ended must
                # not run again because of another job's row.
                claim_error = exc
                done, states = self._complete(conn, batch)
        else:
            done, states = self._complete(conn, batch)
        self.pending = []
        # Counters move once per batch and label set: at high load a flush serves dozens
        # of jobs, and each metric update takes a lock and a file write.
        counts: Counter[tuple[Any, tuple[str, ...]]] = Counter()
        durations: dict[str, list[float]] = {}
        for outcome in batch:
            durations.setdefault(outcome.running.label, []).append(outcome.seconds)
            for key in self._account(outcome, done, states):
                counts[key] += 1
        for (metric, labels), count in counts.items():
            self.metric(metric, *labels).inc(count)
        for label, seconds in durations.items():
            metrics.observe_many(self.metric(metrics.job_duration, self.queue, label), seconds)
        if claim_error is not None:
            raise claim_error
        return Flushed(len(batch), claimed, claim_limit, [o.seconds for o in batch])

    def _complete_and_claim(self, conn: psycopg.Connection[Any], batch: list[Outcome], *,
                            claim_limit: int, lease: float, after: store.ClaimKey | None
                            ) -> tuple[set[int], dict[int, store.JobState],
                                       list[store.ClaimedJob]]:
        """The batch's completions and the next claim, committed together."""
        held, held_solo = self.held_besides(batch)
        self.claims.refresh(conn)
        if all(ended(o) == "succeeded" for o in batch):
            # The common batch: one statement, one round trip, one commit.
            done, claimed = store.complete_and_claim(
                conn, queue=self.queue, done=[(o.running.job.id, o.running.job.fence)
                                              for o in batch],
                results=[o.result for o in batch], limit=claim_limit,
                worker=self.worker_id, lease=lease, held=held, held_solo=held_solo,
                args_limit=self.executor.args_limit, after=after,
                max_bytes=self.claims.max_bytes)
            return done, {}, claimed
        with conn.transaction():
            done, states = self._complete(conn, batch)
            claimed = self.claims(conn, claim_limit, held=held, held_solo=held_solo,
                                  after=after)
        return done, states, claimed

    def held_besides(self, batch: list[Outcome]) -> tuple[int, bool]:
        """The jobs this process keeps running besides `batch`, and whether one of them
        is solo: what the claim must know to contain crashes."""
        ending = {o.running.job.id for o in batch}
        others = [r for job_id, r in self.executor.running.items() if job_id not in ending]
        return len(others), any(r.job.solo for r in others)

    def _complete(self, conn: psycopg.Connection[Any], batch: list[Outcome]
                  ) -> tuple[set[int], dict[int, store.JobState]]:
        return complete(conn, self.worker_id, batch, self.backoff)

    def any_timed_out(self) -> bool:
        return any(o.timed_out for o in self.pending)

    def _account(self, outcome: Outcome, held: set[int], states: dict[int, store.JobState]
                 ) -> list[tuple[Any, tuple[str, ...]]]:
        """Free the job's slot; returns the counters (metric, labels) to move by one."""
        running = outcome.running
        job = running.job
        self.executor.release(job.id)
        self.jobs_done += 1
        queue, label = self.queue, running.label
        kind = ended(outcome)
        if kind != "failed" and job.id in held:
            return [(metrics.jobs_finished, (queue, label, kind))]
        if kind == "failed" and job.id in states:
            after = states[job.id]
            attempt_failed(job, queue, outcome.error or "", timed_out=outcome.timed_out,
                           after=after)
            kind = "timed_out" if outcome.timed_out else "failed"
            follow = ((metrics.jobs_finished, (queue, label, "dead")) if after.state == "dead"
                      else (metrics.job_retries, (queue, label)))
            return [(metrics.jobs_finished, (queue, label, kind)), follow]
        lease_lost(job, queue)
        return [(metrics.lease_lost, (queue,))]
