"""The gauges read from the database, served by the exporter at scrape time.

Written by a process into the multiprocess files they would outlive what they describe: a
label set cannot be removed there, so a deleted queue would keep its last count and an
outage would freeze every value. Read on the scrape instead, they are absent while the
database cannot be reached (and `pgfleet_database_up` says 0) or their own read failed
(`pgfleet_database_read_failed` says which), and a queue that is gone is simply not listed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import psycopg
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from pgfleet import metrics
from pgfleet.errors import DatabaseUnavailable
from pgfleet.sql import fleet as fleet_store, store
from pgfleet.sql.db import connect, scrub

log = logging.getLogger("pgfleet.exporter.process")

# However many scrapers arrive, the database is read at most once per this many seconds.
CACHE_SECONDS = 1.0
CONNECT_TIMEOUT = 2  # libpq rounds anything lower up to 2 seconds
STATEMENT_TIMEOUT = "1s"

T = TypeVar("T")


def _family(gauge: metrics.DatabaseGauge) -> GaugeMetricFamily:
    return GaugeMetricFamily(gauge.name, gauge.documentation, labels=list(gauge.labels))


class QueueLabels:
    """Queue label values of one scrape: configured queues first, then the others up to
    metrics.QUEUE_LABEL_LIMIT, the rest folded into one label (names are data)."""

    def __init__(self, known: Iterable[str], seen: Iterable[str]) -> None:
        self.names: dict[str, str] = {}
        for name in [*sorted(known), *sorted(set(seen))]:
            if name in self.names:
                continue
            fits = len(self.names) < metrics.QUEUE_LABEL_LIMIT and len(name) <= 128
            self.names[name] = name if fits else metrics.OTHER_QUEUES_LABEL

    def __call__(self, name: str) -> str:
        return self.names[name]


# Each read of a scrape, by the name its failure is reported under.
READS = ("queue_counts", "oldest_waiting", "paused_queues", "heartbeat_ages", "flow_usage",
         "xmin_horizon", "claim_costs")


def _read(conn: psycopg.Connection[Any], failed: dict[str, str], name: str,
          read: Callable[[psycopg.Connection[Any]], T], empty: T) -> T:
    """One read in its own savepoint: a statement that fails costs only its gauges, and
    the database still answered. A lost connection is raised, as the database is down."""
    try:
        with conn.transaction():
            return read(conn)
    except psycopg.Error as exc:
        if conn.closed or conn.broken:
            raise
        failed[name] = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        return empty


def read_families(conn: psycopg.Connection[Any], known: Iterable[str],
                  failed: dict[str, str] | None = None) -> list[Metric]:
    """Every database gauge (database_up included) from one read-only transaction.

    A read that fails on its statement leaves its own gauges out and is reported in
    `failed` (read name → first line of the error) and by pgfleet_database_read_failed;
    database_up stays 1, since the database answered."""
    failed = {} if failed is None else failed
    with conn.transaction():
        # jit too, for connections whose options cannot carry it (a transaction pooler).
        conn.execute(f"SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'")
        conn.execute("SET LOCAL jit = off")
        counts: list[tuple[str, str, int]] = _read(
            conn, failed, "queue_counts", fleet_store.queue_counts, [])
        oldest: dict[str, float] = _read(
            conn, failed, "oldest_waiting", fleet_store.oldest_waiting, {})
        paused: set[str] = _read(conn, failed, "paused_queues", fleet_store.paused_queues, set())
        beats: list[store.HeartbeatAge] = _read(
            conn, failed, "heartbeat_ages", fleet_store.heartbeat_ages, [])
        flows: list[store.FlowUsage] = _read(
            conn, failed, "flow_usage", fleet_store.flow_usage, [])
        holders: list[store.XminHolder] = _read(
            conn, failed, "xmin_horizon", fleet_store.xmin_holders, [])
        costs: store.ClaimCosts | None = _read(
            conn, failed, "claim_costs", fleet_store.claim_costs, None)
    label = QueueLabels(known, [c[0] for c in counts] + [*oldest, *paused]
                        + [f.queue for f in flows])
    jobs: dict[tuple[str, str], int] = {}
    for queue, state, n in counts:
        jobs[label(queue), state] = jobs.get((label(queue), state), 0) + n
    ages: dict[str, float] = {}
    for queue, age in oldest.items():
        ages[label(queue)] = max(age, ages.get(label(queue), 0.0))
    flags = {label(q) for q in paused}
    queue_jobs, oldest_age = _family(metrics.queue_jobs), _family(metrics.queue_oldest_age)
    queue_paused = _family(metrics.queue_paused)
    for queue in sorted(set(label.names.values())):
        for state in metrics.QUEUE_STATES:
            queue_jobs.add_metric([queue, state], jobs.get((queue, state), 0))
        oldest_age.add_metric([queue], ages.get(queue, 0.0))
        queue_paused.add_metric([queue], 1 if queue in flags else 0)
    heartbeat = _family(metrics.process_heartbeat_age)
    for beat in beats:
        heartbeat.add_metric([beat.host, beat.kind], max(beat.seconds, 0.0))
    up = _family(metrics.database_up)
    up.add_metric([], 1)
    read_failed = _family(metrics.database_read_failed)
    for name in READS:
        read_failed.add_metric([name], 1 if name in failed else 0)
    # A failed read's gauges are absent, not shown at 0 (an empty queue) or stale.
    read: dict[str, list[Metric]] = {"queue_counts": [queue_jobs], "oldest_waiting": [oldest_age],
            "paused_queues": [queue_paused], "heartbeat_ages": [heartbeat],
            "flow_usage": _flow_families(flows, label),
            "xmin_horizon": _xmin_families(holders), "claim_costs": _cost_families(costs)}
    return [up, read_failed, *(family for name in READS if name not in failed
                               for family in read[name])]


def _flow_families(flows: list[store.FlowUsage], label: QueueLabels) -> list[Metric]:
    """The flow-control gauges of each queue with published limits (a queue folded into
    the overflow label is left out: its limits are its own)."""
    limit, in_use = _family(metrics.flow_limit), _family(metrics.flow_in_use)
    held = _family(metrics.flow_held_jobs)
    for f in flows:
        queue = label(f.queue)
        if queue == metrics.OTHER_QUEUES_LABEL:
            continue
        rows = (("global_concurrency", f.global_concurrency, f.running, f.held_by_global),
                ("rate_limit", f.rate_limit, f.starts, f.held_by_rate),
                ("key_concurrency", f.key_concurrency, f.keys_at_limit, f.held_by_key))
        for name, value, used, waiting in rows:
            if value is None:
                continue
            limit.add_metric([queue, name], value)
            in_use.add_metric([queue, name], used)
            held.add_metric([queue, name], waiting)
    return [limit, in_use, held]


def _xmin_families(holders: list[store.XminHolder]) -> list[Metric]:
    """Each holder kind's oldest xmin, 0 for a kind that holds none, so an alert or a
    panel sees the horizon released rather than a gap."""
    seconds, xids = _family(metrics.xmin_horizon_age), _family(metrics.xmin_horizon_xids)
    by_kind = {h.holder: h for h in holders}
    for kind in metrics.XMIN_HOLDERS:
        found = by_kind.get(kind)
        if kind in metrics.XMIN_TIMED_HOLDERS:
            oldest = found.oldest_seconds if found else None
            seconds.add_metric([kind], max(oldest or 0.0, 0.0))
        xids.add_metric([kind], max(found.xids, 0) if found else 0)
    return [seconds, xids]


def _cost_families(costs: store.ClaimCosts | None) -> list[Metric]:
    dead, index = _family(metrics.jobs_dead_tuples), _family(metrics.claim_index_bytes)
    if costs is not None:
        dead.add_metric([], costs.dead_tuples)
        index.add_metric([], costs.claim_index_bytes)
    return [dead, index]


class DatabaseCollector:
    """A prometheus-client collector: one database read per CACHE_SECONDS under a lock, so
    a burst of scrapes costs one query round. Only `pgfleet_database_up 0` when the
    database cannot be reached or the connection is lost; a read that fails on its
    statement leaves out its own gauges and sets `pgfleet_database_read_failed`."""

    def __init__(self, dsn: str, known_queues: Iterable[str]) -> None:
        self.dsn = dsn
        self.known = sorted(known_queues)
        self.lock = threading.Lock()
        self.read_at = -CACHE_SECONDS
        self.families: list[Metric] = []
        self.failing = False
        self.failed_reads: set[str] = set()

    def collect(self) -> list[Metric]:
        with self.lock:
            if time.monotonic() - self.read_at >= CACHE_SECONDS:
                self.families = self._read()
                self.read_at = time.monotonic()
            return self.families

    def _read(self) -> list[Metric]:
        try:
            with connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                         process=True) as conn:
                failed: dict[str, str] = {}
                families = read_families(conn, self.known, failed)
        except (psycopg.Error, DatabaseUnavailable) as exc:
            if not self.failing:
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                log.warning("metrics: cannot read the database (pgfleet_database_up 0): %s",
                            scrub(text, self.dsn))
            self.failing = True
            up = _family(metrics.database_up)
            up.add_metric([], 0)
            return [up]
        if self.failing:
            log.info("metrics: the database answers again")
        self.failing = False
        for name in sorted(set(failed) - self.failed_reads):
            log.warning("metrics: the %s read failed (pgfleet_database_read_failed 1,"
                        " the database is up): %s", name, scrub(failed[name], self.dsn))
        for name in sorted(self.failed_reads - set(failed)):
            log.info("metrics: the %s read answers again", name)
        self.failed_reads = set(failed)
        return families
