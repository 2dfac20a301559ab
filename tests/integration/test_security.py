"""Security: pgfleet's functions and queries cannot be redirected by objects planted in
public, the producer role holds, running rows stay leased, unique keys are per task."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.sql import migrate as migrations
from tests.support import pg
from tests.support.roles import login_roles, plant_trap, role_dsn, trap_hits
from tests.support.workers import wait_for, worker_thread

Roles = Callable[[str], str]


@pytest.fixture
def owner_dsn(template_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated database as its owner, whatever PGFLEET_TEST_ROLE says: these tests
    create roles and grant to them."""
    with pg.fresh_database(template_db) as url:
        monkeypatch.setenv("PGFLEET_AUDIT_DSN", url)
        monkeypatch.setenv("PGFLEET_DATABASE_URL", url)
        yield url


@pytest.fixture
def roles(owner_dsn: str) -> Iterator[Roles]:
    with login_roles(owner_dsn) as make:
        yield make


def cli(dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PGFLEET_DATABASE_URL": dsn})


def one(conn: psycopg.Connection[Any], query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row


def test_planted_operator_does_not_run_in_enqueue_or_the_trigger(
        owner_dsn: str, roles: Roles) -> None:
    plant_trap(owner_dsn, roles("attacker"))
    # The caller's search_path is the default one, with public on it.
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        first = one(conn, "SELECT pgfleet.enqueue('noop', '{}', unique_key => 'k')")[0]
        # The second call finds the first job: the SELECT path of the function.
        again = one(conn, "SELECT * FROM pgfleet.enqueue_job('noop', unique_key => 'k')")
        assert again == (first, False)
        # A plain INSERT fires the NOTIFY trigger on its own.
        conn.execute("INSERT INTO pgfleet.jobs (queue, task) VALUES ('default', 'noop')")
        assert trap_hits(conn) == []


def test_planted_operator_does_not_run_in_status_or_a_worker_claim(
        owner_dsn: str, roles: Roles) -> None:
    job_id = pgfleet.enqueue(owner_dsn, "noop")
    plant_trap(owner_dsn, roles("attacker"))
    status = cli(owner_dsn, "status", "--json")
    assert status.returncode == 0, status.stderr
    with worker_thread(owner_dsn):
        wait_for(lambda: pg_state(owner_dsn, job_id) == "succeeded")
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        assert trap_hits(conn) == []


def test_planted_operator_does_not_run_in_a_limited_claim(
        owner_dsn: str, roles: Roles) -> None:
    from pgfleet.core.flow import FlowLimits, Rate

    job_id = pgfleet.enqueue(owner_dsn, "noop", concurrency_key="k")
    plant_trap(owner_dsn, roles("attacker"))
    limits = FlowLimits(global_concurrency=2, rate=Rate(10, 1.0))
    with worker_thread(owner_dsn, flow=limits):
        wait_for(lambda: pg_state(owner_dsn, job_id) == "succeeded")
    status = cli(owner_dsn, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert '"global_concurrency": 2' in status.stdout
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        assert trap_hits(conn) == []


def pg_state(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return str(one(conn, f"SELECT state::text FROM pgfleet.jobs WHERE id = {job_id}")[0])


def test_producer_enqueues_but_cannot_read_or_write_jobs(owner_dsn: str, roles: Roles) -> None:
    producer = roles("producer")
    applied = cli(owner_dsn, "grants", "--producer", producer, "--apply")
    assert applied.returncode == 0, applied.stderr
    as_producer = role_dsn(owner_dsn, producer)
    job_id = pgfleet.enqueue(as_producer, "send", {"token": "secret"})
    with psycopg.connect(as_producer, autocommit=True) as conn:
        again = one(conn, "SELECT * FROM pgfleet.enqueue_job('send', unique_key => 'u')")
        assert again[1] is True
        for statement in ("SELECT args FROM pgfleet.jobs",
                          "INSERT INTO pgfleet.jobs (queue, task) VALUES ('q', 't')",
                          "UPDATE pgfleet.jobs SET state = 'dead'",
                          "SELECT * FROM pgfleet.migrations"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    # The bulk enqueue goes through functions that run as their owner too, unique keys
    # included: a key held already gives back the holder's id.
    bulk = pgfleet.enqueue_many(as_producer, [{"task": "send", "unique_key": "u"},
                                              {"task": "send", "meta": {"tag": "b"}}])
    assert bulk[0] == again[0] and bulk[1] > bulk[0]
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        assert one(conn, f"SELECT args->>'token' FROM pgfleet.jobs WHERE id = {job_id}")[0] \
            == "secret"


def test_enqueue_is_not_executable_by_public(owner_dsn: str, roles: Roles) -> None:
    stranger = roles("stranger")
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute(f'GRANT USAGE ON SCHEMA pgfleet TO "{stranger}"')
    with (psycopg.connect(role_dsn(owner_dsn, stranger), autocommit=True) as conn,
          pytest.raises(psycopg.errors.InsufficientPrivilege,
                        match="permission denied for function enqueue")):
        conn.execute("SELECT pgfleet.enqueue('noop')")


def test_runtime_role_reads_but_cannot_write_migrations(owner_dsn: str, roles: Roles) -> None:
    runtime = roles("runtime")
    printed = cli(owner_dsn, "grants", "--runtime", runtime)
    assert printed.returncode == 0 and "GRANT SELECT ON pgfleet.migrations" in printed.stdout
    applied = cli(owner_dsn, "grants", "--runtime", runtime, "--apply")
    assert applied.returncode == 0, applied.stderr
    with psycopg.connect(role_dsn(owner_dsn, runtime), autocommit=True) as conn:
        assert one(conn, "SELECT max(version) FROM pgfleet.migrations")[0] \
            == migrations.latest_version()
        for statement in ("INSERT INTO pgfleet.migrations (version, name) VALUES (999, 'x')",
                          "UPDATE pgfleet.migrations SET version = 999",
                          "DELETE FROM pgfleet.migrations"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


def test_grants_names_what_is_missing(owner_dsn: str, roles: Roles) -> None:
    result = cli(owner_dsn, "grants")
    assert result.returncode == 2
    assert result.stderr.strip() == "pgfleet: error: give --runtime ROLE, --producer ROLE or both"
    runtime = roles("runtime")
    missing = cli(owner_dsn, "grants", "--runtime", runtime, "--producer", "no_such_role_x",
                  "--apply")
    assert missing.returncode == 1
    assert missing.stderr.strip() == \
        'pgfleet: error: database error: role "no_such_role_x" does not exist'
    # All or nothing: the runtime role's statements, which came first, were rolled back.
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        granted = one(conn, f"SELECT has_table_privilege('{runtime}', 'pgfleet.jobs', 'SELECT')")
    assert granted == (False,)


def test_a_running_row_without_a_lease_is_refused(owner_dsn: str) -> None:
    job_id = pgfleet.enqueue(owner_dsn, "noop")
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        for statement in (
                f"UPDATE pgfleet.jobs SET state = 'running' WHERE id = {job_id}",
                f"UPDATE pgfleet.jobs SET state = 'running', lease_holder = 'h'"
                f" WHERE id = {job_id}",
                "INSERT INTO pgfleet.jobs (queue, task, state, lease_expires_at)"
                " VALUES ('q', 't', 'running', now())"):
            with pytest.raises(psycopg.errors.CheckViolation, match="jobs_running_leased"):
                conn.execute(statement)
        conn.execute("UPDATE pgfleet.jobs SET state = 'running', lease_holder = 'h',"
                     f" lease_expires_at = now() WHERE id = {job_id}")


def test_two_tasks_may_use_the_same_unique_key(owner_dsn: str) -> None:
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        a = one(conn, "SELECT * FROM pgfleet.enqueue_job('a', unique_key => 'k')")
        b = one(conn, "SELECT * FROM pgfleet.enqueue_job('b', unique_key => 'k')")
        a_again = one(conn, "SELECT * FROM pgfleet.enqueue_job('a', unique_key => 'k')")
        b_id = one(conn, "SELECT pgfleet.enqueue('b', unique_key => 'k')")[0]
    assert a[1] is True and b[1] is True and a[0] != b[0]
    assert a_again == (a[0], False) and b_id == b[0]
    # The Python client, one by one and in bulk, scopes keys the same way.
    assert pgfleet.enqueue(owner_dsn, "c", unique_key="k") not in (a[0], b[0])
    many = pgfleet.enqueue_many(owner_dsn, [
        {"task": "a", "unique_key": "k"}, {"task": "d", "unique_key": "k"},
        {"task": "b", "unique_key": "k"}, {"task": "d", "unique_key": "k"}])
    assert many[0] == a[0] and many[2] == b[0] and many[1] == many[3]
    assert many[1] not in (a[0], b[0])


def test_upgrade_gives_an_unleased_running_row_an_expired_lease(empty_dsn: str) -> None:
    migrations.migrate(empty_dsn, target=3)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, state, attempt)"
                     " VALUES ('q', 't', 'running', 1)")
    migrations.migrate(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        row = one(conn, "SELECT state::text, lease_holder, lease_expires_at <= now()"
                        " FROM pgfleet.jobs")
    assert row == ("running", "pgfleet-migration-0005", True)


def test_every_connection_pins_its_search_path(owner_dsn: str) -> None:
    from pgfleet.sql.db import connect

    # A setting the DSN gives is kept beside the pinned path.
    with connect(owner_dsn + " options='-c statement_timeout=7s'") as conn:
        assert one(conn, "SHOW search_path")[0] == "pg_catalog,pgfleet"
        assert one(conn, "SHOW statement_timeout")[0] == "7s"


def test_every_connection_plans_each_execution(owner_dsn: str) -> None:
    """A generic plan cached while a queue was empty scans the whole backlog on every
    claim later (bench.probes idle-arrival: a tenth of the rate after 15 s idle)."""
    from pgfleet.sql.db import connect

    with connect(owner_dsn) as conn:
        assert one(conn, "SHOW plan_cache_mode")[0] == "force_custom_plan"


def test_migrating_does_not_run_a_planted_operator(empty_dsn: str) -> None:
    migrations.migrate(empty_dsn, target=3)
    with login_roles(empty_dsn) as make:
        plant_trap(empty_dsn, make("attacker"))
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO pgfleet.jobs (queue, task, state, attempt)"
                         " VALUES ('q', 't', 'running', 1)")
            conn.execute("DELETE FROM public.trap_hits")
        migrations.migrate(empty_dsn)
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            assert trap_hits(conn) == []


def test_every_pgfleet_function_pins_its_search_path(owner_dsn: str) -> None:
    # Every function of the schema, whatever file or migration made it: one that resolves
    # names through its caller's search_path can be redirected by whoever creates in a
    # schema on that path.
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_catalog.pg_proc p"
            " WHERE p.pronamespace = 'pgfleet'::regnamespace ORDER BY 1").fetchall()
    assert len(rows) >= 20
    unpinned = [name for name, config in rows
                if not any(setting.startswith("search_path=pg_catalog")
                           for setting in config or [])]
    assert unpinned == []


# Exact-type functions beat pg_catalog's `VARIADIC "any"` ones wherever their schema is on
# the path, even behind pg_catalog; pg_notify(text, text) wherever it comes first.
HOSTILE_FUNCTIONS = """
CREATE TABLE public.hostile_hits (fn text NOT NULL);
GRANT INSERT, SELECT ON public.hostile_hits TO PUBLIC;
CREATE FUNCTION public.jsonb_build_object(text, integer, text, timestamptz, text, text)
RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.hostile_hits VALUES ('jsonb_build_object');
    RETURN pg_catalog.jsonb_build_object($1, $2, $3, $4, $5, $6);
END;
$$;
CREATE FUNCTION public.jsonb_build_array(jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.hostile_hits VALUES ('jsonb_build_array');
    RETURN pg_catalog.jsonb_build_array($1);
END;
$$;
CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.hostile_hits VALUES ('pg_notify');
    PERFORM pg_catalog.pg_notify($1, $2);
END;
$$;
"""


def test_a_planted_exact_type_function_is_not_called(owner_dsn: str, roles: Roles) -> None:
    attacker = roles("attacker")
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute(f'GRANT CREATE, USAGE ON SCHEMA public TO "{attacker}"')
    with psycopg.connect(role_dsn(owner_dsn, attacker), autocommit=True) as conn:
        conn.execute(HOSTILE_FUNCTIONS.encode())
    # pg_catalog first on the caller's path, as pgfleet's connections have it: the
    # planted functions are live all the same.
    with psycopg.connect(owner_dsn, autocommit=True,
                         options="-c search_path=pg_catalog,public") as conn:
        conn.execute("SELECT jsonb_build_array(jsonb_build_object("
                     "'attempt', 1, 'at', now(), 'error', 'e'::text))")
        assert [r[0] for r in conn.execute("SELECT fn FROM public.hostile_hits")] \
            == ["jsonb_build_object", "jsonb_build_array"], "not live"
        conn.execute("DELETE FROM public.hostile_hits")
        conn.execute("SELECT * FROM pgfleet.failed_attempt(1, 3, now(), '[]', 'boom', 5)")
        conn.execute("SELECT * FROM pgfleet.failed_attempt(3, 3, now(), '[]', 'boom')")
        conn.execute("SELECT pgfleet.notify_queue('default')")
        job_id = one(conn, "SELECT pgfleet.enqueue('noop')")[0]
        assert conn.execute("SELECT fn FROM public.hostile_hits").fetchall() == []
    with psycopg.connect(owner_dsn, autocommit=True,
                         options="-c search_path=public,pg_catalog") as conn:
        conn.execute("SELECT pg_notify('c', 'p')")
        assert [r[0] for r in conn.execute("SELECT fn FROM public.hostile_hits")] \
            == ["pg_notify"], "not live"
        conn.execute("DELETE FROM public.hostile_hits")
        conn.execute("SELECT * FROM pgfleet.failed_attempt(1, 3, now(), '[]', 'boom', 5)")
        conn.execute("SELECT pgfleet.notify_queue('default')")
        assert conn.execute("SELECT fn FROM public.hostile_hits").fetchall() == []
    assert pg_state(owner_dsn, job_id) == "queued"
