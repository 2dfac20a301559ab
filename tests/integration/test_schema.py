"""The current schema in one place: schema.sql and functions/ build the same database as the
migrations do, each function lives in the file named for it, and `pgfleet migrate` brings
a database up to them in place, while workers run."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

import pgfleet
from pgfleet.sql import migrate as migrations
from tests.integration.test_migrations import schema_dump
from tests.support.pg import AUDIT_TABLE
from tests.support.workers import scalar, states, wait_for, worker_process

FUNCTIONS = Path(migrations.__file__).parent / "functions"
CREATED = re.compile(r"^CREATE OR REPLACE FUNCTION pgfleet\.([a-z_]+)\(", re.M)


def _upgraded(dsn: str) -> None:
    """A database built as the previous releases built it: migration after migration."""
    migrations.migrate(dsn, target=1)
    migrations.migrate(dsn)


def test_the_current_files_build_what_every_migration_builds(empty_dsn: str,
                                                              template_db: str) -> None:
    from tests.support.pg import dsn_for

    _upgraded(empty_dsn)
    assert schema_dump(empty_dsn) == schema_dump(dsn_for(template_db))
    assert "CREATE TABLE pgfleet.jobs" in schema_dump(empty_dsn)


def test_each_function_is_in_the_one_file_named_for_it(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        names = {row[0] for row in conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'pgfleet'::regnamespace")}
    files = {path.stem: path.read_text() for path in FUNCTIONS.glob("*.sql")}
    assert set(files) == names
    for stem, text in files.items():
        assert set(CREATED.findall(text)) == {stem}, f"functions/{stem}.sql"


def test_a_function_gets_its_files_body_back_from_migrate(dsn: str) -> None:
    body = "SELECT pg_catalog.pg_get_functiondef('pgfleet.job_result(bigint)'::regprocedure)"
    before = scalar(dsn, body)
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE OR REPLACE FUNCTION pgfleet.job_result(job_id bigint)"
                     " RETURNS jsonb LANGUAGE sql AS $$ SELECT '1'::jsonb $$")
    assert scalar(dsn, body) != before
    migrations.migrate(dsn)
    assert scalar(dsn, body) == before


def test_a_database_upgrades_in_place_while_its_workers_run(
        empty_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _upgraded(empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        conn.execute(AUDIT_TABLE)
    monkeypatch.setenv("PGFLEET_AUDIT_DSN", empty_dsn)
    worker = worker_process(empty_dsn, "default", "--threads", "4")
    stop = threading.Event()
    enqueued: list[int] = []

    def produce() -> None:
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            while not stop.is_set() and len(enqueued) < 400:
                enqueued.append(pgfleet.enqueue(conn, "noop"))

    producer = threading.Thread(target=produce)
    try:
        wait_for(lambda: scalar(empty_dsn, "SELECT count(*) FROM pgfleet.processes"
                                           " WHERE kind = 'worker'"))
        producer.start()
        for _ in range(3):
            done = subprocess.run(
                [sys.executable, "-m", "pgfleet", "--database-url", empty_dsn, "migrate"],
                capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip().endswith(f"schema version {migrations.latest_version()}")
        producer.join(60)
        assert not producer.is_alive()
        wait_for(lambda: states(empty_dsn) == {"succeeded": len(enqueued)}, timeout=60)
        assert scalar(empty_dsn, "SELECT max(attempt) FROM pgfleet.jobs") == 1
        assert scalar(empty_dsn, "SELECT count(*) FROM audit WHERE event = 'finished'") \
            == len(enqueued)
        assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
    finally:
        stop.set()
        worker.terminate()
        worker.wait(30)


def _body(dsn: str, signature: str) -> str:
    return str(scalar(dsn, f"SELECT pg_get_functiondef('{signature}'::regprocedure)"))


def test_a_database_a_newer_pgfleet_migrated_is_left_alone(dsn: str) -> None:
    latest = migrations.latest_version()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.migrations (version, name) VALUES (%s, 'newer')",
                     (latest + 1,))
        conn.execute("CREATE OR REPLACE FUNCTION pgfleet.job_result(job_id bigint)"
                     " RETURNS jsonb LANGUAGE sql AS $$ SELECT '2'::jsonb $$")
    newer = _body(dsn, "pgfleet.job_result(bigint)")
    done = subprocess.run([sys.executable, "-m", "pgfleet", "--database-url", dsn, "migrate"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"at version {latest + 1}, newer than this pgfleet's {latest}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert _body(dsn, "pgfleet.job_result(bigint)") == newer


def test_a_mistake_in_a_function_file_fails_the_migrate_and_changes_nothing(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    files = migrations.functions()
    before = _body(dsn, "pgfleet.job_result(bigint)")
    for broken in (files["cancel_jobs"].replace("END IF;", "END IFF;", 1),
                   files["failed_attempt"].replace("FROM (SELECT", "FROMM (SELECT", 1)):
        name = "cancel_jobs" if "IFF" in broken else "failed_attempt"
        assert broken != files[name]
        monkeypatch.setattr(migrations, "functions", lambda b=broken, n=name: {
            **files, "job_result": files["job_result"].replace("SELECT", "SELECT  ", 1),
            n: b})
        with pytest.raises(migrations.MigrationError, match=f"sql/functions/{name}.sql: "):
            migrations.migrate(dsn)
        assert _body(dsn, "pgfleet.job_result(bigint)") == before  # rolled back whole


def test_a_migrate_gives_up_on_a_lock_held_elsewhere_and_changes_nothing(
        empty_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    migrations.migrate(empty_dsn, target=20)
    monkeypatch.setattr(migrations, "LOCK_TIMEOUT", "1s")
    with psycopg.connect(empty_dsn) as holder:
        holder.execute("LOCK pgfleet.jobs IN ACCESS SHARE MODE")  # a long report, say
        with pytest.raises(migrations.MigrationError, match="held a lock"):
            migrations.migrate(empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        assert migrations.current_version(conn) == 20


def test_a_target_outside_the_migrations_is_refused(dsn: str) -> None:
    latest = migrations.latest_version()
    for target, says in ((0, "run from 1"), (latest + 1, "run from 1"),
                         (3, "do not go back")):
        with pytest.raises(migrations.MigrationError, match=says):
            migrations.migrate(dsn, target=target)
