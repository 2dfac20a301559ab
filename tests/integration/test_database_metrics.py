"""The database gauges are read at scrape time (pgfleet.exporter.database): current values,
queues that no longer exist dropped, a resumed queue no longer paused, host heartbeats,
and nothing but `pgfleet_database_up 0` while the database cannot be read."""

from __future__ import annotations

import socket
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry

import pgfleet
from pgfleet import metrics
from pgfleet.exporter.database import DatabaseCollector
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
