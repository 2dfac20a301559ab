"""The claims' heads (schema.sql, queue_heads): a claim starts each priority's walk at its
head, past the dead entries of the jobs claimed before, and no waiting job is ever left
behind a head. A long snapshot (REPEATABLE READ held open) keeps every dead entry alive,
so without heads each claim steps over all of them."""

from __future__ import annotations

import statistics
from datetime import timedelta
from typing import Any

import psycopg

import pgfleet
from pgfleet.sql import fleet as fleet_store, migrate as migrations, store

Conn = psycopg.Connection[Any]


def claim_buffers(conn: Conn) -> int:
    """Shared buffers one claim of up to 10 reads (the claim runs for real)."""
    row = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM pgfleet.claim_jobs("
        "'default', 10, 'w', 30, 1048576, 0, false, NULL, NULL, NULL, NULL)").fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


def finish_running(conn: Conn) -> None:
    for job_id, fence in conn.execute(
            "SELECT id, fence FROM pgfleet.jobs WHERE state = 'running'").fetchall():
        store.complete_succeeded(conn, worker="w", done=[(job_id, fence)])


def claimed_ids(conn: Conn, queue: str = "default") -> list[int]:
    return [job.id for job in store.claim(conn, queue=queue, limit=100, worker="w", lease=30)]


def test_under_a_held_snapshot_a_claim_reads_no_more_as_jobs_run(dsn: str) -> None:
    holder = psycopg.connect(dsn)
    try:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgfleet.jobs").fetchone()
        with psycopg.connect(dsn, autocommit=True) as conn:
            cost = []
            for i in range(800):
                pgfleet.enqueue(conn, "noop")
                cost.append(claim_buffers(conn))
                finish_running(conn)
                if i % 20 == 0:  # what maintenance does once per pass
                    fleet_store.move_heads(conn)
            dead = conn.execute("SELECT n_dead_tup FROM pg_stat_user_tables"
                                " WHERE relid = 'pgfleet.jobs'::regclass").fetchone()
    finally:
        holder.rollback()
        holder.close()
    early, late = statistics.median(cost[50:150]), statistics.median(cost[-100:])
    # Without heads a claim here reads about one buffer more per 13 jobs run before it
    # (over 60 more by the end); with them it reads what the first claims read.
    assert late <= early * 1.3 + 5, (early, late, dead)


def test_a_job_inserted_before_a_move_and_committed_after_it_is_claimed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as late:
        pgfleet.enqueue(conn, "noop")
        # A producer's transaction that started before the jobs below were claimed.
        late.execute("SELECT now()")
        job_id = pgfleet.enqueue(late, "noop")
        for _ in range(30):
            pgfleet.enqueue(conn, "noop")
            claimed_ids(conn)
            fleet_store.move_heads(conn)
        late.commit()
        assert claimed_ids(conn) == [job_id]


def test_a_producer_that_read_the_head_while_it_moved_is_found_by_the_next_move(
        dsn: str) -> None:
    """The one case a move leaves to the next: the producer's lock came after the move
    read the locks, and its read of the head before the move committed."""
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as mover, \
            psycopg.connect(dsn) as late:
        pgfleet.enqueue(conn, "noop")
        claimed_ids(conn)
        late.execute("SELECT now()")  # the producer's transaction, and its run_at, begin
        for _ in range(5):
            pgfleet.enqueue(conn, "noop")
            claimed_ids(conn)
        assert fleet_store.move_heads(mover) == 1  # read the locks: none yet
        job_id = pgfleet.enqueue(late, "noop")  # reads the head the move has not committed
        mover.commit()
        late.commit()
        assert claimed_ids(conn) == []  # behind the moved head...
        fleet_store.move_heads(conn)  # ...until the next move rechecks what it passed
        assert claimed_ids(conn) == [job_id]


def test_a_job_due_in_the_past_is_claimed_at_once(conn: Conn) -> None:
    for _ in range(20):
        pgfleet.enqueue(conn, "noop")
        claimed_ids(conn)
        fleet_store.move_heads(conn)
    old = conn.execute("SELECT now() - interval '1 day'").fetchone()
    assert old is not None
    job_id = pgfleet.enqueue(conn, "noop", run_at=old[0])
    assert claimed_ids(conn) == [job_id]


def test_a_new_priority_and_a_retry_are_claimed(conn: Conn) -> None:
    for _ in range(10):
        pgfleet.enqueue(conn, "noop")
        claimed_ids(conn)
        fleet_store.move_heads(conn)
    urgent = pgfleet.enqueue(conn, "noop", priority=-5)
    [job] = store.claim(conn, queue="default", limit=10, worker="w", lease=30)
    assert job.id == urgent
    for _ in range(3):
        fleet_store.move_heads(conn)
    # A failure due again at once goes back behind heads that moved since it was claimed.
    store.complete_failed(conn, worker="w", failures=[store.Failure(
        id=job.id, fence=job.fence, error="boom", delay=0.0, final=False)])
    assert claimed_ids(conn) == [urgent]


def test_an_upgraded_database_has_heads_for_its_waiting_jobs(empty_dsn: str) -> None:
    migrations.migrate(empty_dsn, target=27)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, priority, run_at) VALUES"
                     " ('default', 'a', 0, now() - interval '1 hour'),"
                     " ('default', 'b', 3, now()), ('other', 'c', 0, now())")
    migrations.migrate(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        heads = conn.execute("SELECT queue, priority FROM pgfleet.queue_heads"
                             " ORDER BY 1, 2").fetchall()
        assert heads == [("default", 0), ("default", 3), ("other", 0)]
        tasks = [j.task for j in store.claim(conn, queue="default", limit=10, worker="w",
                                             lease=30)]
        assert sorted(tasks) == ["a", "b"]
        assert [j.task for j in store.claim(conn, queue="other", limit=10, worker="w",
                                            lease=30)] == ["c"]


def test_a_job_due_now_behind_a_head_in_the_future_is_claimed(conn: Conn) -> None:
    """A priority whose only job is scheduled for later has its head there; a job due now
    of that priority lowers it."""
    pgfleet.enqueue(conn, "noop", delay=timedelta(hours=1))
    for _ in range(3):
        fleet_store.move_heads(conn)
    job_id = pgfleet.enqueue(conn, "noop")
    assert claimed_ids(conn) == [job_id]
