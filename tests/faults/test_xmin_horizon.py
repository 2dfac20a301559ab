"""A held xmin horizon is seen coming: the exporter's gauges grow while a snapshot, a
prepared transaction or a replication slot holds it, `pgfleet status` names the holder,
and both clear once it ends. A throwaway cluster of its own (logical WAL, prepared
transactions), since holding the horizon of the shared server would bloat other runs."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

import pgfleet
from pgfleet import metrics
from pgfleet.cli import cli
from pgfleet.exporter.database import DatabaseCollector
from pgfleet.status import fleet as status
from tests.support.cluster import SERVER_USER, Cluster
from tests.support.workers import wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster().init()
    with open(c.data / "postgresql.conf", "a") as conf:
        conf.write("wal_level = logical\nmax_prepared_transactions = 4\n"
                   "max_wal_senders = 4\nmax_replication_slots = 4\n")
    with open(c.data / "pg_hba.conf", "a") as hba:
        hba.write("local replication all trust\nhost replication all 127.0.0.1/32 trust\n")
    c.start()
    c.make_template()
    try:
        yield c
    finally:
        c.destroy()


@pytest.fixture
def dsn(cluster: Cluster) -> Iterator[str]:
    with cluster.fresh_database() as name:
        yield cluster.url(name)


def scrape(collector: DatabaseCollector) -> Samples:
    registry = CollectorRegistry()
    registry.register(collector)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples}


def gauge(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def seconds(collector: DatabaseCollector, holder: str) -> float:
    value = gauge(scrape(collector), metrics.xmin_horizon_age.name, holder=holder)
    assert value is not None, f"no {holder} series"
    return value


def xids(collector: DatabaseCollector, holder: str) -> float:
    value = gauge(scrape(collector), metrics.xmin_horizon_xids.name, holder=holder)
    assert value is not None, f"no {holder} series"
    return value


def churn(dsn: str, n: int = 200) -> None:
    """Jobs enqueued and deleted: transaction ids spent and dead rows left behind."""
    pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": "churn"}] * n)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgfleet.jobs WHERE queue = 'churn'")
        for _ in range(20):
            conn.execute("SELECT txid_current()")


def status_data(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return status.gather(conn)


def status_text(dsn: str) -> str:
    """`pgfleet status`, the command itself, in this process (so the threshold below
    holds for it too)."""
    result = CliRunner().invoke(cli, ["--database-url", dsn, "status"])
    assert result.exit_code == 0, result.output
    return result.output


def held_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("xmin horizon held")]


@pytest.fixture
def quick_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    # The status names a holder past a minute; a test holds it for seconds.
    monkeypatch.setattr(status, "HELD_SECONDS", 2.0)


def test_a_repeatable_read_report_is_seen_growing_named_and_cleared(
        dsn: str, quick_threshold: None) -> None:
    collector = DatabaseCollector(dsn, ["default"])
    # Nothing holds the horizon: every kind reads 0, and nothing is named.
    before = scrape(collector)
    for kind in metrics.XMIN_HOLDERS:
        assert gauge(before, metrics.xmin_horizon_xids.name, holder=kind) == 0
    assert gauge(before, metrics.xmin_horizon_age.name, holder="backend") == 0
    assert (gauge(before, metrics.claim_index_bytes.name) or 0) > 0
    assert held_lines(status_text(dsn)) == []

    report = psycopg.connect(dsn, application_name="nightly-report")
    try:
        report.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        report.execute("SELECT count(*) FROM pgfleet.jobs /* the monthly report */")
        pid = report.info.backend_pid
        churn(dsn)
        first = wait_for(lambda: seconds(collector, "backend") >= 1.0 or 0, timeout=15)
        assert first
        start = seconds(collector, "backend")
        wait_for(lambda: seconds(collector, "backend") >= start + 1.0, timeout=15)
        assert xids(collector, "backend") >= 20
        # The dead rows it keeps are counted (the deleting session's statistics are
        # flushed within a second or so) and VACUUM cannot remove them.
        wait_for(lambda: (gauge(scrape(collector), metrics.jobs_dead_tuples.name) or 0)
                 >= 200, timeout=15)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM pgfleet.jobs")
        wait_for(lambda: (gauge(scrape(collector), metrics.jobs_dead_tuples.name) or 0)
                 >= 200, timeout=5)

        wait_for(lambda: held_lines(status_text(dsn)), timeout=15)
        text = status_text(dsn)
        [line] = held_lines(text)
        assert f'by pid {pid} (app "nightly-report", idle in transaction)' in line
        assert line.endswith("vacuum cannot clean pgfleet.jobs")
        assert "  query: SELECT count(*) FROM pgfleet.jobs /* the monthly report */" in text
        [shown] = status_data(dsn)["xmin_horizon"]["held"]
        assert (shown["holder"], shown["pid"], shown["name"]) == (
            "backend", pid, "nightly-report")
        assert shown["state"] == "idle in transaction" and shown["seconds"] >= 2.0
        as_json = json.loads(CliRunner().invoke(
            cli, ["--database-url", dsn, "status", "--json"]).output)
        assert as_json["xmin_horizon"]["held"][0]["pid"] == pid
    finally:
        report.close()
    # Ended: the gauges fall back and the line is gone; VACUUM now removes the rows.
    wait_for(lambda: seconds(collector, "backend") < 1.0, timeout=15)
    wait_for(lambda: xids(collector, "backend") == 0, timeout=15)
    assert held_lines(status_text(dsn)) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM pgfleet.jobs")
    wait_for(lambda: gauge(scrape(collector), metrics.jobs_dead_tuples.name) == 0, timeout=15)


def test_a_prepared_transaction_holds_it_until_it_is_committed(
        dsn: str, quick_threshold: None) -> None:
    collector = DatabaseCollector(dsn, ["default"])
    with psycopg.connect(dsn) as conn:
        # An enqueue notifies, which PREPARE refuses: a plain write holds an xid too.
        conn.execute("UPDATE pgfleet.queues SET paused = paused")
        conn.execute("SELECT txid_current()")
        conn.execute("PREPARE TRANSACTION 'payments-batch-7'")
    try:
        churn(dsn)
        wait_for(lambda: seconds(collector, "prepared") >= 1.0, timeout=15)
        start = seconds(collector, "prepared")
        wait_for(lambda: seconds(collector, "prepared") >= start + 1.0, timeout=15)
        assert xids(collector, "prepared") >= 20
        # A prepared transaction has no session: the backend kind stays clear.
        assert xids(collector, "backend") == 0
        wait_for(lambda: held_lines(status_text(dsn)), timeout=15)
        [line] = held_lines(status_text(dsn))
        assert 'by prepared transaction "payments-batch-7" — vacuum cannot clean' in line
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("COMMIT PREPARED 'payments-batch-7'")
    assert seconds(collector, "prepared") == 0 or wait_for(
        lambda: seconds(collector, "prepared") == 0, timeout=15)
    assert xids(collector, "prepared") == 0
    assert held_lines(status_text(dsn)) == []


def test_a_logical_slot_holds_only_the_catalogs_not_the_jobs(dsn: str) -> None:
    collector = DatabaseCollector(dsn, ["default"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('cdc_probe', 'test_decoding')")
        try:
            churn(dsn)
            [(xmin, catalog_xmin)] = conn.execute(
                "SELECT xmin::text, catalog_xmin::text FROM pg_replication_slots"
                " WHERE slot_name = 'cdc_probe'").fetchall()
            assert xmin is None and catalog_xmin is not None
            # So it is not reported, and VACUUM removes the dead jobs under it.
            assert xids(collector, "slot") == 0
            wait_for(lambda: (gauge(scrape(collector), metrics.jobs_dead_tuples.name) or 0)
                     >= 200, timeout=15)
            conn.execute("VACUUM pgfleet.jobs")
            wait_for(lambda: gauge(scrape(collector), metrics.jobs_dead_tuples.name) == 0,
                     timeout=15)
        finally:
            conn.execute("SELECT pg_drop_replication_slot('cdc_probe')")


def test_another_databases_transaction_counts_by_its_xid_not_its_snapshot(
        cluster: Cluster, dsn: str) -> None:
    collector = DatabaseCollector(dsn, ["default"])
    other = cluster.create_database()
    try:
        # A snapshot there does not hold this database's rows: not counted.
        snapshot = psycopg.connect(cluster.dsn(other))
        snapshot.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        snapshot.execute("SELECT 1")
        churn(dsn)
        assert xids(collector, "backend") == 0
        # A transaction id there does: every snapshot taken here while it runs keeps it.
        writer = psycopg.connect(cluster.dsn(other), application_name="other-app")
        writer.execute("SELECT txid_current()")
        churn(dsn)
        wait_for(lambda: xids(collector, "backend") >= 20, timeout=15)
        writer.close()
        snapshot.close()
        wait_for(lambda: xids(collector, "backend") == 0, timeout=15)
    finally:
        cluster.drop_database(other)


def test_without_pg_read_all_stats_another_roles_session_counts_by_its_xids(
        cluster: Cluster, dsn: str, quick_threshold: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    name = dsn.rsplit("/", 1)[1]
    role = f"watcher_{name[-10:]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA pgfleet TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA pgfleet TO {role}")
    watcher = cluster.url(name, user=role)
    collector = DatabaseCollector(watcher, ["default"])
    report = psycopg.connect(dsn, application_name="ops-report")
    try:
        report.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        report.execute("SELECT count(*) FROM pgfleet.jobs")
        churn(dsn)
        wait_for(lambda: xids(collector, "backend") >= 20, timeout=15)
        samples = scrape(collector)
        assert gauge(samples, metrics.database_read_failed.name, read="xmin_horizon") == 0
        # Its start time is hidden: it is not in the seconds, however long it runs.
        wait_for(lambda: status_data(dsn)["xmin_horizon"]["held"], timeout=15)
        assert seconds(collector, "backend") == 0
        # Status names it by its xids, with its pid and application only.
        monkeypatch.setattr(status, "HELD_XIDS", 10)
        text = status_text(watcher)
        [line] = held_lines(text)
        assert line.startswith("xmin horizon held ") and " xids by pid " in line
        assert f'pid {report.info.backend_pid} (app "ops-report")' in line
        assert "grant pg_read_all_stats" in text and "query:" not in text

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"GRANT pg_read_all_stats TO {role}")
        wait_for(lambda: seconds(collector, "backend") >= 2.0, timeout=15)
        [line] = held_lines(status_text(watcher))
        assert f'pid {report.info.backend_pid} (app "ops-report", idle in transaction)' in line
    finally:
        report.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def start_standby(primary: Cluster, *, slot: str | None) -> Cluster:
    """A hot standby of `primary` with hot_standby_feedback, streaming through `slot`
    (created by pg_basebackup) or through none."""
    standby = Cluster()
    standby.sockets.mkdir(parents=True, exist_ok=True)
    if standby.as_root:
        entry = pwd.getpwnam(SERVER_USER)
        for path in (standby.root, standby.sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    slot_args = ["-S", slot, "-C"] if slot else []
    try:
        # A fast checkpoint: a spread one waits out most of checkpoint_timeout first.
        standby._run("pg_basebackup", "-D", str(standby.data), "-h", "127.0.0.1",
                     "-p", str(primary.port), "-U", "postgres", "-R", "-X", "stream",
                     "-c", "fast", *slot_args)
        with open(standby.data / "postgresql.conf", "a") as conf:
            conf.write(f"port = {standby.port}\n"
                       f"unix_socket_directories = '{standby.sockets}'\n"
                       "hot_standby_feedback = on\nwal_receiver_status_interval = 1s\n")
        standby.start()
    except BaseException:
        standby.destroy()
        raise
    return standby


def report_on(standby: Cluster, dsn: str) -> psycopg.Connection[Any]:
    """A REPEATABLE READ snapshot held on the standby: its feedback holds the primary."""
    conn = psycopg.connect(standby.dsn(dsn.rsplit("/", 1)[1]))
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.execute("SELECT count(*) FROM pgfleet.jobs")
    return conn


def test_a_slot_keeps_a_standbys_xmin_after_the_standby_is_gone(
        cluster: Cluster, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    collector = DatabaseCollector(dsn, ["default"])
    standby = start_standby(cluster, slot="standby_one")
    try:
        report = report_on(standby, dsn)
        churn(dsn)
        # The standby's snapshot reaches the slot's xmin within a status interval.
        wait_for(lambda: xids(collector, "slot") >= 20, timeout=30)
        assert xids(collector, "standby") == 0  # through a slot, the walsender holds none
        # An active slot is named only once its xmin is very old.
        assert held_lines(status_text(dsn)) == []
        monkeypatch.setattr(status, "HELD_XIDS", 10)
        [line] = held_lines(status_text(dsn))
        assert 'by replication slot "standby_one" (active)' in line
        monkeypatch.undo()
        report.close()
        standby.stop()
        # Gone, the standby leaves its last xmin on the slot, which no one advances now.
        before = xids(collector, "slot")
        churn(dsn)
        wait_for(lambda: xids(collector, "slot") >= before + 20, timeout=15)
        [line] = held_lines(status_text(dsn))
        assert line.startswith("xmin horizon held ") and " xids by replication slot" in line
        assert '"standby_one" (inactive) — vacuum cannot clean pgfleet.jobs' in line
    finally:
        standby.destroy()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot('standby_one')")
    wait_for(lambda: xids(collector, "slot") == 0, timeout=15)
    assert held_lines(status_text(dsn)) == []


def test_a_standby_without_a_slot_holds_it_while_connected(
        cluster: Cluster, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    collector = DatabaseCollector(dsn, ["default"])
    standby = start_standby(cluster, slot=None)
    try:
        report = report_on(standby, dsn)
        churn(dsn)
        wait_for(lambda: xids(collector, "standby") >= 20, timeout=30)
        assert xids(collector, "slot") == 0
        monkeypatch.setattr(status, "HELD_XIDS", 10)
        [line] = held_lines(status_text(dsn))
        assert " xids by standby pid " in line and "streaming)" in line
        report.close()
        standby.stop()
        wait_for(lambda: xids(collector, "standby") == 0, timeout=15)
        assert held_lines(status_text(dsn)) == []
    finally:
        standby.destroy()


def test_a_holders_query_is_shown_short_on_one_line_with_its_controls_escaped(
        dsn: str, quick_threshold: None) -> None:
    report = psycopg.connect(dsn, application_name="tricky")
    try:
        report.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        report.execute("SELECT count(*)\n  FROM pgfleet.jobs /* \x1b[2J\x1b]0;owned\x07 */"
                       " WHERE queue <> 'x" + "y" * 200 + "'")
        wait_for(lambda: held_lines(status_text(dsn)), timeout=15)
        text = status_text(dsn)
        [query] = [line for line in text.splitlines() if line.startswith("  query: ")]
        assert "\x1b" not in text and "\x07" not in text
        assert query.startswith("  query: SELECT count(*) FROM pgfleet.jobs /* \\x1b[2J")
        assert query.endswith("...")
    finally:
        report.close()


def test_a_read_committed_session_idle_in_transaction_holds_it_only_once_it_wrote(
        dsn: str, quick_threshold: None) -> None:
    collector = DatabaseCollector(dsn, ["default"])
    idle = psycopg.connect(dsn, application_name="forgot-to-commit")
    try:
        # Between statements READ COMMITTED keeps no snapshot: nothing is held.
        idle.execute("SELECT count(*) FROM pgfleet.jobs")
        churn(dsn)
        wait_for(lambda: status_data(dsn)["xmin_horizon"]["held"] == []
                 and seconds(collector, "backend") == 0, timeout=15)
        assert xids(collector, "backend") == 0
        # A write gives it a transaction id, which every later snapshot must respect.
        idle.execute("UPDATE pgfleet.queues SET paused = paused")
        idle.execute("SELECT txid_current()")
        churn(dsn)
        wait_for(lambda: xids(collector, "backend") >= 20, timeout=15)
        wait_for(lambda: held_lines(status_text(dsn)), timeout=15)
        [line] = held_lines(status_text(dsn))
        assert '(app "forgot-to-commit", idle in transaction)' in line
    finally:
        idle.close()
