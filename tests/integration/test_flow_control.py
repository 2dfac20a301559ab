"""Flow control at claim time (migration 0014, docs/flow-control.md): the limited claim
against a real database, raced from many connections at once."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.core.flow import FlowLimits, Rate
from pgfleet.sql import fleet as fleet_store, rescue as rescue_store, store
from tests.support.flow import claim_limited
from tests.support.rescue import rescue_all
from tests.support.workers import scalar, wait_for

Q = "limited"


def claim(conn: psycopg.Connection[Any], worker: str, limits: FlowLimits,
          limit: int = 10) -> list[int]:
    jobs = claim_limited(conn, queue=Q, limit=limit, worker=worker, lease=30,
                               limits=limits)
    return sorted(job.id for job in jobs)


def finish(conn: psycopg.Connection[Any], worker: str, ids: list[int]) -> None:
    fences = {r[0]: r[1] for r in conn.execute(
        "SELECT id, fence FROM pgfleet.jobs WHERE id = ANY(%s)", (ids,)).fetchall()}
    store.complete_succeeded(conn, worker=worker, done=[(i, fences[i]) for i in ids])


def fence_of(conn: psycopg.Connection[Any], job_id: int) -> int:
    row = conn.execute("SELECT fence FROM pgfleet.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return int(row[0])


def enqueue(dsn: str, count: int, key: Callable[[int], str | None] = lambda _: None
            ) -> list[int]:
    return pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": Q, "concurrency_key": key(i)}
                                      for i in range(count)])


def running(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                           " WHERE queue = %s AND state = 'running'", (Q,)))


def test_global_concurrency_holds_and_finishing_frees_a_slot(conn: Any, dsn: str) -> None:
    enqueue(dsn, 5)
    limits = FlowLimits(global_concurrency=2)
    first = claim(conn, "w1", limits)
    assert len(first) == 2
    assert claim(conn, "w2", limits) == []
    finish(conn, "w1", first[:1])
    assert len(claim(conn, "w2", limits)) == 1
    assert running(dsn) == 2


def test_a_rescued_job_frees_its_slot(conn: Any, dsn: str) -> None:
    enqueue(dsn, 3)
    limits = FlowLimits(global_concurrency=1)
    [held] = claim(conn, "dead-worker", limits)
    assert claim(conn, "w2", limits) == []
    rescue_store.rescue_holder(conn, worker="dead-worker", error="worker died: SIGKILL",
                               delays={held: 0.0}, shared=False)
    assert len(claim(conn, "w2", limits)) == 1


def test_an_expired_lease_and_a_give_back_free_their_slots(conn: Any, dsn: str) -> None:
    enqueue(dsn, 3)
    limits = FlowLimits(global_concurrency=1)
    [lost] = claim(conn, "vanished-host", limits)
    assert claim(conn, "w2", limits) == []
    # What maintenance does once it saw the lease unrenewed for a whole lease.
    assert rescue_all(conn) == [lost]
    [given] = claim(conn, "w2", limits)
    assert claim(conn, "w3", limits) == []
    assert store.give_back(conn, worker="w2") == [given]
    assert len(claim(conn, "w3", limits)) == 1


def test_a_solo_job_runs_alone_in_its_worker(conn: Any, dsn: str) -> None:
    first, solo, last = enqueue(dsn, 3)
    conn.execute("UPDATE pgfleet.jobs SET solo = true WHERE id = %s", (solo,))
    limits = FlowLimits(global_concurrency=5)
    assert claim(conn, "w1", limits, limit=1) == [first]
    assert claim(conn, "w1", limits) == []  # holding a job: the solo one stops the claim
    finish(conn, "w1", [first])
    assert claim(conn, "w1", limits) == [solo]
    assert claim(conn, "w1", limits) == []  # holding a solo job: nothing more
    assert claim(conn, "w2", limits) == [last]


def test_the_exporter_reads_the_flow_gauges(conn: Any, dsn: str) -> None:
    from pgfleet.exporter.database import read_families

    enqueue(dsn, 3)
    fleet_store.publish_limits(conn, published_by="s",
                         limits={Q: FlowLimits(global_concurrency=1), "plain": None})
    claim(conn, "w1", FlowLimits())
    samples = {(m.name, s.labels["queue"], s.labels["limit"]): s.value
               for m in read_families(conn, [Q, "plain"]) if m.name.startswith("pgfleet_flow")
               for s in m.samples}
    assert samples == {
        ("pgfleet_flow_limit", Q, "global_concurrency"): 1,
        ("pgfleet_flow_in_use", Q, "global_concurrency"): 1,
        ("pgfleet_flow_held_jobs", Q, "global_concurrency"): 2,
        ("pgfleet_flow_limit", Q, "key_concurrency"): 1,
        ("pgfleet_flow_in_use", Q, "key_concurrency"): 0,
        ("pgfleet_flow_held_jobs", Q, "key_concurrency"): 0,
    }


def test_racing_claims_never_exceed_the_global_limit(dsn: str) -> None:
    """Twelve connections claim at once, round after round, finishing part of what they
    hold between rounds: the running count never passes the limit."""
    enqueue(dsn, 300)
    limits = FlowLimits(global_concurrency=3)
    barrier = threading.Barrier(12)
    peaks: list[int] = []
    errors: list[BaseException] = []

    def claimer(index: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                for _ in range(15):
                    barrier.wait(timeout=60)
                    ids = claim(c, f"w{index}", limits, limit=3)
                    peaks.append(running(dsn))
                    barrier.wait(timeout=60)
                    if ids:
                        finish(c, f"w{index}", ids)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert max(peaks) == 3
    # Every finished job was claimed once, three per round.
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'") == 45
    assert scalar(dsn, "SELECT max(attempt) FROM pgfleet.jobs") == 1


def max_in_window(starts: list[Any], period: timedelta) -> int:
    """The most starts in any half-open window (t - period, t]: the maximum is reached by
    a window that ends on a start."""
    return max(sum(1 for s in starts if end - period < s <= end) for end in starts)


def test_racing_claims_never_start_more_than_the_rate_in_any_window(dsn: str) -> None:
    ids = enqueue(dsn, 16)
    limits = FlowLimits(rate=Rate(4, 0.5))
    errors: list[BaseException] = []

    def claimer(index: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                while scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'queued'"):
                    ids = claim(c, f"w{index}", limits, limit=3)
                    if ids:
                        finish(c, f"w{index}", ids)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    with psycopg.connect(dsn) as c:
        starts = [r[0] for r in c.execute(
            "SELECT started_at FROM pgfleet.jobs WHERE id = ANY(%s) ORDER BY started_at",
            (ids,)).fetchall()]
    assert len(starts) == 16
    assert max_in_window(starts, timedelta(seconds=0.5)) == 4


def test_a_retry_is_a_start_of_the_rate(conn: Any, dsn: str) -> None:
    [job] = enqueue(dsn, 1)
    limits = FlowLimits(rate=Rate(2, 60.0))
    assert claim(conn, "w1", limits) == [job]
    store.complete_failed(conn, worker="w1", failures=[
        store.Failure(id=job, fence=fence_of(conn, job), error="boom", delay=0.0, final=False)])
    assert claim(conn, "w1", limits) == [job]  # the retry: the second start of the window
    enqueue(dsn, 1)
    assert claim(conn, "w1", limits) == []


def test_a_worker_of_a_limited_queue_claims_no_more_than_its_threads(dsn: str) -> None:
    from tests.support.workers import worker_thread

    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep", "queue": Q, "args": {"seconds": 0.2}}]
                               * 5)
    most = 0

    def drained() -> bool:
        nonlocal most
        most = max(most, running(dsn))
        return bool(scalar(dsn, "SELECT count(*) = 5 FROM pgfleet.jobs"
                                " WHERE id = ANY(%s) AND state = 'succeeded'", (ids,)))

    # Prefetch set past the config's check: the worker still claims only free threads.
    with worker_thread(dsn, Q, threads=1, prefetch=4, flow=FlowLimits(global_concurrency=9)):
        wait_for(drained, interval=0.01)
    assert most == 1


def test_keys_run_one_at_a_time_first_in_first_out_without_blocking_others(
    conn: Any, dsn: str
) -> None:
    a1, a2, b1, free, a3, b2 = enqueue(dsn, 6, key=lambda i: "aabxab"[i].replace("x", "")
                                       or None)
    limits = FlowLimits()  # key_concurrency 1
    assert claim(conn, "w1", limits) == [a1, b1, free]
    assert claim(conn, "w2", limits) == []
    finish(conn, "w1", [a1])
    # a2 comes before a3: first in, first out per key; b still runs, so b2 waits.
    assert claim(conn, "w2", limits) == [a2]
    finish(conn, "w1", [b1])
    assert claim(conn, "w2", limits) == [b2]
    # Waiting spent no attempt.
    assert scalar(dsn, "SELECT attempt FROM pgfleet.jobs WHERE id = %s", (a3,)) == 0


def test_key_concurrency_two(conn: Any, dsn: str) -> None:
    ids = enqueue(dsn, 5, key=lambda _: "k")
    assert claim(conn, "w1", FlowLimits(key_concurrency=2)) == ids[:2]
    assert claim(conn, "w1", FlowLimits(key_concurrency=2)) == []


def test_a_job_waiting_for_its_retry_does_not_hold_its_key(conn: Any, dsn: str) -> None:
    first, second = enqueue(dsn, 2, key=lambda _: "k")
    assert claim(conn, "w1", FlowLimits()) == [first]
    store.complete_failed(conn, worker="w1", failures=[
        store.Failure(id=first, fence=fence_of(conn, first), error="boom", delay=60.0,
                      final=False)])
    assert claim(conn, "w1", FlowLimits()) == [second]


def test_priorities_order_the_limited_claim(conn: Any, dsn: str) -> None:
    low = pgfleet.enqueue(dsn, "noop", queue=Q, priority=5)
    high = pgfleet.enqueue(dsn, "noop", queue=Q, priority=-5)
    assert claim(conn, "w1", FlowLimits(global_concurrency=1)) == [high]
    finish(conn, "w1", [high])
    assert claim(conn, "w1", FlowLimits(global_concurrency=1)) == [low]


def test_published_limits_win_over_the_workers_own(conn: Any, dsn: str) -> None:
    enqueue(dsn, 5)
    fleet_store.publish_limits(conn, published_by="supervisor-a",
                         limits={Q: FlowLimits(global_concurrency=1)})
    assert len(claim(conn, "w1", FlowLimits(global_concurrency=4))) == 1
    # A reload that drops the limits lifts them.
    fleet_store.publish_limits(conn, published_by="supervisor-a", limits={Q: None})
    assert len(claim(conn, "w1", FlowLimits(global_concurrency=4))) == 4


def test_the_limited_claim_refuses_a_stronger_isolation_level(conn: Any, dsn: str) -> None:
    enqueue(dsn, 1)
    conn.execute("SET default_transaction_isolation = 'repeatable read'")
    with pytest.raises(psycopg.errors.InvalidTransactionState, match="READ COMMITTED"):
        claim(conn, "w1", FlowLimits(global_concurrency=1))
    conn.execute("SET default_transaction_isolation = 'read committed'")
    assert len(claim(conn, "w1", FlowLimits(global_concurrency=1))) == 1


def test_a_paused_queue_yields_nothing(conn: Any, dsn: str) -> None:
    enqueue(dsn, 2)
    store.set_paused(conn, Q, True)
    assert claim(conn, "w1", FlowLimits(global_concurrency=2)) == []
    store.set_paused(conn, Q, False)
    assert len(claim(conn, "w1", FlowLimits(global_concurrency=2))) == 2


def test_usage_counts_what_each_limit_holds_back(conn: Any, dsn: str) -> None:
    enqueue(dsn, 4, key=lambda i: "k" if i < 3 else None)
    enqueue(dsn, 2)
    fleet_store.publish_limits(conn, published_by="s",
                         limits={Q: FlowLimits(global_concurrency=2, rate=Rate(10, 60.0))})
    claimed = claim(conn, "w1", FlowLimits())
    assert len(claimed) == 2  # the first k and one unkeyed job
    [usage] = fleet_store.flow_usage(conn)
    assert (usage.global_concurrency, usage.running, usage.rate_limit, usage.starts) == (
        2, 2, 10, 2)
    assert (usage.due, usage.keys_at_limit) == (4, 1)
    assert usage.held_by_global == 4  # the queue is full: every due job waits for it
    assert usage.held_by_rate == 0  # 8 starts left in the window
    assert usage.held_by_key == 2  # the two k jobs behind the running one


def test_the_worker_uses_the_limited_claim_for_a_limited_queue(dsn: str) -> None:
    from tests.support.workers import worker_thread

    ids = enqueue(dsn, 6, key=lambda _: "same")
    with worker_thread(dsn, Q, threads=4, flow=FlowLimits()):
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                     " WHERE state = 'succeeded'") == 6)
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT min(at) FILTER (WHERE event = 'finished'), job_id FROM audit"
            " GROUP BY job_id ORDER BY 1").fetchall()
        published = c.execute("SELECT key_concurrency FROM pgfleet.queue_limits"
                              " WHERE queue = %s", (Q,)).fetchone()
    # One key, one at a time, in enqueue order.
    assert [r[1] for r in rows] == ids
    assert published == (1,)


def test_a_lone_worker_without_limits_of_its_own_follows_the_published_ones(
        dsn: str) -> None:
    # Outside trial: a `pgfleet worker` (no supervisor, no limits in its settings) beside
    # a fleet ran 4 jobs at once on a queue published with global_concurrency 1.
    from tests.support.workers import worker_process

    with psycopg.connect(dsn, autocommit=True) as conn:
        fleet_store.publish_limits(conn, published_by="supervisor-a",
                                   limits={Q: FlowLimits(global_concurrency=1)})
    ids = [pgfleet.enqueue(dsn, "sleep", {"seconds": 0.3}, queue=Q) for _ in range(6)]
    worker = worker_process(dsn, Q, "--threads", "4")
    try:
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                     " WHERE state = 'succeeded'") == len(ids), timeout=60)
    finally:
        worker.terminate()
        worker.wait(30)
    with psycopg.connect(dsn) as c:
        spans = c.execute(
            "SELECT min(at) FILTER (WHERE event = 'started'),"
            "       max(at) FILTER (WHERE event = 'finished') FROM audit"
            " GROUP BY job_id ORDER BY 1").fetchall()
    assert len(spans) == len(ids)
    # Never two at once: each run starts after the one before it finished.
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
