from __future__ import annotations

import os
from typing import Any

import psycopg
from prometheus_client import REGISTRY

import pgfleet
from pgfleet.config import parse_config_text
from pgfleet.maintenance.process import Maintenance
from tests.support.workers import scalar, states, wait_for


def maintenance(dsn: str, **kwargs: Any) -> Maintenance:
    config = parse_config_text("queues:\n  default: {}\nmaintenance: {retention: 1h}\n")
    read_end, write_end = os.pipe()
    m = Maintenance(config, dsn, supervisor_id="host-a:1:aa", supervisor_pid=os.getpid(),
                    rescue_fd=read_end, beacon=None, **kwargs)
    m.write_end = write_end  # type: ignore[attr-defined]
    return m


def sample(name: str, labels: dict[str, str]) -> float | None:
    value = REGISTRY.get_sample_value(name, labels)
    return value


def test_jobs_of_a_vanished_host_are_rescued_once_their_leases_stop_beating(
        dsn: str) -> None:
    """Rescue watches each lease's beat counter on the rescuer's monotonic clock and
    ignores lease_expires_at: here the expiry times say the opposite of the truth, as
    after a jump of the server's clock."""
    ids = pgfleet.enqueue_many(dsn, [{"task": "noop", "max_attempts": 2}] * 3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Host B claimed them; the worker of the first two vanished (their expiry an hour
        # ahead), the third's still renews (its expiry an hour behind).
        conn.execute("UPDATE pgfleet.jobs SET state = 'running', attempt = 1,"
                     " lease_holder = 'host-b:9:ff', lease_expires_at = now() + interval '1h'"
                     " WHERE id = ANY(%s)", (ids[:2],))
        conn.execute("UPDATE pgfleet.jobs SET state = 'running', attempt = 2,"
                     " lease_holder = 'host-b:9:ff', lease_expires_at = now() - interval '1h'"
                     " WHERE id = %s", (ids[2],))
        conn.execute("UPDATE pgfleet.jobs SET attempt = 2 WHERE id = %s", (ids[1],))
        m = maintenance(dsn)
        m.lease_watch.stale_after = 1.0
        m.pass_once()
        assert states(dsn) == {"running": 3}  # nothing watched for a lease yet

        def renew_and_pass() -> bool:
            # Host B's live worker renews (the beat alone: its expiry stays in the past).
            conn.execute("UPDATE pgfleet.jobs SET beats = beats + 1 WHERE id = %s", (ids[2],))
            m.pass_once()
            return states(dsn).get("running") == 1

        wait_for(renew_and_pass, timeout=30, interval=0.2)
        rows = dict(conn.execute("SELECT id, state::text FROM pgfleet.jobs").fetchall())
        error = conn.execute("SELECT last_error FROM pgfleet.jobs WHERE id = %s",
                             (ids[0],)).fetchone()
    assert rows == {ids[0]: "queued", ids[1]: "dead", ids[2]: "running"}
    assert error is not None and "lease expired" in error[0]


def test_a_reaped_worker_is_rescued_through_the_pipe(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "noop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'running', attempt = 1,"
                     " lease_holder = 'host-a:77:aa', lease_expires_at = now() + interval '1h'")
    m = maintenance(dsn)
    os.write(m.write_end, b"host-a:77:aa\tdied\tworker died: SIGKILL\n")  # type: ignore[attr-defined]
    m.read_requests(1.0)
    m.pass_once()
    assert states(dsn) == {"queued": 1}
    assert scalar(dsn, "SELECT last_error FROM pgfleet.jobs WHERE id = %s",
                  (job_id,)) == "worker died: SIGKILL"


def test_a_worker_that_gave_up_its_leases_is_rescued_refunded_not_crashed(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "noop", max_attempts=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'running', attempt = 1,"
                     " lease_holder = 'host-a:77:aa', lease_expires_at = now() + interval '1h'")
    m = maintenance(dsn)
    os.write(m.write_end,  # type: ignore[attr-defined]
             f"host-a:77:aa\tgave_up\tgiven back: the worker could not renew its leases"
             f"\t{job_id}\n".encode())
    m.read_requests(1.0)
    m.pass_once()
    assert scalar(dsn, "SELECT (state::text, attempt, refunds, crashes, solo, last_error)::text"
                       " FROM pgfleet.jobs WHERE id = %s", (job_id,)) == (
        '(queued,1,1,0,f,"given back: the worker could not renew its leases'
        ' (attempt refunded)")')


def test_the_enqueue_counter_comes_from_the_database(dsn: str) -> None:
    m = maintenance(dsn)
    m.pass_once()  # the counter starts here
    before = sample("pgfleet_jobs_enqueued_total", {"queue": "gauges-q"}) or 0.0
    pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": "gauges-q"}] * 5)
    pgfleet.enqueue(dsn, "noop", queue="gauges-q", delay=3600)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgfleet.enqueue('noop', '{}', queue => 'gauges-q')")
    m.pass_once()
    assert sample("pgfleet_jobs_enqueued_total", {"queue": "gauges-q"}) == before + 7


def test_prune_removes_finished_jobs_past_retention(dsn: str) -> None:
    ids = pgfleet.enqueue_many(dsn, [{"task": "noop"}] * 4)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'succeeded',"
                     " finished_at = now() - interval '2 hours' WHERE id = ANY(%s)",
                     (ids[:3],))
    maintenance(dsn).pass_once()
    assert states(dsn) == {"queued": 1}
