"""The database gauges are read at scrape time (pgfleet.exporter.database): current values,
queues that no longer exist dropped, a resumed queue no longer paused, host heartbeats,
nothing but `pgfleet_database_up 0` while the database cannot be reached, and a read that
fails on its statement (a lock, a timeout, JIT) reported apart, the database still up."""

from __future__ import annotations

import socket
import time
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry

import pgfleet
from pgfleet import metrics
from pgfleet.exporter.database import DatabaseCollector
from tests.support import pg
from tests.support.workers import wait_for


def scrape(collector: DatabaseCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples}


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def queues_of(samples: dict[Any, float]) -> set[str]:
    return {dict(labels)["queue"] for name, labels in samples
            if name == metrics.queue_jobs.name}


def test_gauges_follow_the_database_and_drop_what_is_gone(dsn: str) -> None:
    pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": "gauges-q"}] * 5)
    pgfleet.enqueue(dsn, "noop", queue="gauges-q", delay=3600)
    pgfleet.enqueue(dsn, "noop", queue="held")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.queues (name, paused) VALUES ('held', true)"
                     " ON CONFLICT (name) DO UPDATE SET paused = true")
        conn.execute("INSERT INTO pgfleet.processes (id, host, pid, kind)"
                     " VALUES ('web-9:1:w', 'web-9', 1, 'worker')")
    collector = DatabaseCollector(dsn, ["default"])
    first = scrape(collector)
    assert value(first, "pgfleet_database_up") == 1
    assert value(first, "pgfleet_queue_jobs", queue="gauges-q", state="queued") == 5
    assert value(first, "pgfleet_queue_jobs", queue="gauges-q", state="scheduled") == 1
    assert value(first, "pgfleet_queue_jobs", queue="default", state="queued") == 0
    assert value(first, "pgfleet_queue_paused", queue="held") == 1
    assert (value(first, "pgfleet_queue_oldest_job_age_seconds", queue="gauges-q") or -1) >= 0
    age = value(first, "pgfleet_process_heartbeat_age_seconds", host="web-9", kind="worker")
    assert age is not None and age >= 0

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgfleet.jobs WHERE queue = 'gauges-q'")
        conn.execute("UPDATE pgfleet.queues SET paused = false WHERE name = 'held'")
        conn.execute("DELETE FROM pgfleet.processes WHERE host = 'web-9'")
    # The cache holds a read for about a second; the next read has none of it.
    wait_for(lambda: "gauges-q" not in queues_of(scrape(collector)), timeout=10)
    later = scrape(collector)
    assert queues_of(later) == {"default", "held"}
    assert value(later, "pgfleet_queue_paused", queue="held") == 0
    assert not [k for k in later if dict(k[1]).get("host") == "web-9"]


def test_an_unreachable_database_leaves_only_database_up_0() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    samples = scrape(DatabaseCollector(f"postgresql://nobody@127.0.0.1:{port}/none", ["a"]))
    assert samples == {("pgfleet_database_up", ()): 0.0}


def test_hostile_queue_names_fold_into_one_label(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.jobs (queue, task) SELECT 'hostile-' || g, 'x'"
                     " FROM generate_series(1, %s) g", (metrics.QUEUE_LABEL_LIMIT + 50,))
    labels = queues_of(scrape(DatabaseCollector(dsn, ["default"])))
    assert len(labels) == metrics.QUEUE_LABEL_LIMIT + 1
    assert {"default", metrics.OTHER_QUEUES_LABEL} <= labels


def test_a_read_that_times_out_is_not_a_database_down(dsn: str) -> None:
    pgfleet.enqueue(dsn, "noop", queue="locked-out")
    collector = DatabaseCollector(dsn, ["default"])
    with psycopg.connect(dsn) as holder:
        # The paused_queues read waits for this lock past its statement timeout.
        holder.execute("LOCK TABLE pgfleet.queues IN ACCESS EXCLUSIVE MODE")
        samples = scrape(collector)
    assert value(samples, "pgfleet_database_up") == 1
    assert value(samples, "pgfleet_database_read_failed", read="paused_queues") == 1
    assert value(samples, "pgfleet_database_read_failed", read="queue_counts") == 0
    # The reads that answered keep their gauges; the failed one's are absent, not 0.
    assert value(samples, "pgfleet_queue_jobs", queue="locked-out", state="queued") == 1
    assert not [k for k in samples if k[0] == metrics.queue_paused.name]
    # The lock gone, the next read (after the cache's second) is whole again.
    wait_for(lambda: value(scrape(collector), "pgfleet_database_read_failed",
                           read="paused_queues") == 0, timeout=10)
    assert value(scrape(collector), "pgfleet_queue_paused", queue="locked-out") == 0


def test_a_scrape_stays_fast_with_jit_forced_on(dsn: str) -> None:
    pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": "jit-q"}] * 50)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.queue_limits (queue, global_concurrency,"
                     " key_concurrency, published_by, updated_at)"
                     " VALUES ('jit-q', 4, 2, 'test', now())")
        name = conn.info.dbname
    with pg.admin() as admin:
        # Every statement past these thresholds (all of them) is compiled, optimised and
        # inlined: the server's defaults, crossed by the estimates of a large table.
        for setting in ("jit = on", "jit_above_cost = 0", "jit_optimize_above_cost = 0",
                        "jit_inline_above_cost = 0"):
            admin.execute(f'ALTER DATABASE "{name}" SET {setting}')
    collector = DatabaseCollector(dsn, ["default"])
    started = time.monotonic()
    samples = scrape(collector)
    elapsed = time.monotonic() - started
    assert value(samples, "pgfleet_database_up") == 1
    assert {labels: n for (metric, labels), n in samples.items()
            if metric == metrics.database_read_failed.name and n} == {}
    assert value(samples, "pgfleet_queue_jobs", queue="jit-q", state="queued") == 50
    assert elapsed < 0.5, elapsed
