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
