from __future__ import annotations

import subprocess
import sys
import threading

import psycopg

from pgfleet.sql import migrate as migrations


def schema_dump(dsn: str) -> str:
    out = subprocess.run(
        ["pg_dump", "--schema-only", "--no-owner", "--schema=pgfleet", dsn],
        check=True, capture_output=True, text=True,
    ).stdout
    # The migrations table holds timestamps, not shape; comments and settings vary.
    return "\n".join(
        line for line in out.splitlines()
        if line and not line.startswith(("--", "SET ", "\\restrict", "\\unrestrict"))
        and "pg_catalog.set_config" not in line
    )


def test_fresh_install_equals_upgrade_from_first(empty_dsn: str, template_db: str) -> None:
    from tests.support.pg import dsn_for

    version, applied = migrations.migrate(empty_dsn, target=1)
    assert version == 1 and [m.version for m in applied] == [1]
    version, applied = migrations.migrate(empty_dsn)
    assert version == migrations.latest_version()
    # Versions need not be contiguous (branches take numbers apart): every one after 1.
    assert [m.version for m in applied] == [m.version for m in migrations.available()][1:]
    fresh = dsn_for(template_db)
    assert schema_dump(empty_dsn) == schema_dump(fresh)


def test_migrate_is_idempotent_and_prints_version(empty_dsn: str) -> None:
    cmd = [sys.executable, "-m", "pgfleet", "--database-url", empty_dsn, "migrate"]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    second = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    latest = migrations.latest_version()
    assert "applied 0001_jobs" in first and first.strip().endswith(f"schema version {latest}")
    assert second.strip() == f"schema version {latest}"


def test_concurrent_migrations_do_not_collide(empty_dsn: str) -> None:
    results: list[object] = []

    def run() -> None:
        try:
            results.append(migrations.migrate(empty_dsn)[0])
        except Exception as exc:  # collected and asserted below
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [migrations.latest_version()] * 4
    with psycopg.connect(empty_dsn) as conn:
        count = conn.execute("SELECT count(*) FROM pgfleet.migrations").fetchone()
    assert count == (len(migrations.available()),)


def test_a_worker_role_of_an_older_install_may_claim_after_the_upgrade(empty_dsn: str) -> None:
    """Migration 0018 moved the claims into functions: a role that ran workers before it
    (it may update pgfleet.jobs) is granted them by the upgrade, so its workers keep
    claiming without `pgfleet grants` being applied again."""
    from pgfleet.sql import store
    from tests.support.pg import admin, dsn_for

    migrations.migrate(empty_dsn, target=17)
    role = f"old_worker_{threading.get_ident() % 100000}"
    with admin() as server:
        server.execute(f"DROP ROLE IF EXISTS {role}")
        server.execute(f"CREATE ROLE {role} LOGIN")
    try:
        with psycopg.connect(empty_dsn, autocommit=True) as owner:
            owner.execute(f"GRANT USAGE ON SCHEMA pgfleet TO {role}")
            owner.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.jobs,"
                          f" pgfleet.queues TO {role}")
            owner.execute("INSERT INTO pgfleet.jobs (queue, task) VALUES ('default', 'a'),"
                          " ('default', 'b')")
        migrations.migrate(empty_dsn)
        dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
        with psycopg.connect(dsn_for(str(dbname), user=role), autocommit=True) as worker:
            [first] = store.claim(worker, queue="default", limit=1, worker="w", lease=60,
                                  held=0, held_solo=False)
            done, [second] = store.complete_and_claim(
                worker, queue="default", done=[(first.id, first.fence)], limit=5,
                worker="w", lease=60, held=0, held_solo=False)
            assert done == {first.id} and {first.task, second.task} == {"a", "b"}
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as owner:
            owner.execute(f"DROP OWNED BY {role}")
        with admin() as server:
            server.execute(f"DROP ROLE {role}")


def test_counters_at_the_integer_limit_are_refused_and_old_ones_brought_back(
        empty_dsn: str) -> None:
    """Outside trial: attempt or crashes at 2147483647, written straight into the table,
    made every claim reaching the row (attempt + 1) or the rescue (crashes + 1) fail, which
    took the queue down. 0022 refuses them and brings rows written before it in bounds, so
    such a row is claimed like any other."""
    from pgfleet.sql import store

    migrations.migrate(empty_dsn, target=21)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, attempt, crashes, refunds, "
                     "max_attempts) VALUES ('q', 'old', 2147483647, 2147483647, -5, 1000)")
    migrations.migrate(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT attempt, crashes, refunds FROM pgfleet.jobs").fetchone() \
            == (1000000, 1000000, 0)
        [job] = store.claim(conn, queue="q", limit=5, worker="w", lease=60, held=0,
                            held_solo=False)
        assert job.attempt == 1000000  # saturated at the bound, not past it
        for column in ("attempt", "crashes", "refunds"):
            try:
                conn.execute(f"INSERT INTO pgfleet.jobs (queue, task, {column})"
                             " VALUES ('q', 'new', 2147483647)")
            except psycopg.errors.CheckViolation as refused:
                assert "bound" in str(refused) or "refunds_check" in str(refused)
            else:
                raise AssertionError(f"{column} 2147483647 was accepted")


def test_a_scheduler_role_of_an_older_install_keeps_firing_after_the_upgrade(
        empty_dsn: str) -> None:
    """Migration 0029 keeps the schedules in the database: a role that fired schedules
    before it (it may write schedule_runs) is granted the new tables and functions, so its
    scheduler keeps firing without `pgfleet grants` being applied again."""
    from pgfleet.config import parse_config_text
    from pgfleet.cron.scheduler import Scheduler
    from tests.support.pg import admin, dsn_for

    migrations.migrate(empty_dsn, target=26)
    role = f"old_scheduler_{threading.get_ident() % 100000}"
    with admin() as server:
        server.execute(f"DROP ROLE IF EXISTS {role}")
        server.execute(f"CREATE ROLE {role} LOGIN")
    try:
        with psycopg.connect(empty_dsn, autocommit=True) as owner:
            owner.execute(f"GRANT USAGE ON SCHEMA pgfleet TO {role}")
            owner.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.jobs,"
                          f" pgfleet.schedule_runs TO {role}")
            owner.execute("GRANT EXECUTE ON FUNCTION pgfleet.enqueue(text, jsonb, text,"
                          " integer, timestamptz, integer, text, jsonb, text) TO " + role)
            owner.execute("INSERT INTO pgfleet.schedule_runs (schedule, fire_time)"
                          " VALUES ('tick', date_trunc('minute', now()) - interval '1 minute')")
        migrations.migrate(empty_dsn)
        dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
        config = parse_config_text('queues:\n  default: {}\nschedules:\n  tick:\n'
                                   '    cron: "* * * * *"\n    task: noop\n')
        fired = Scheduler(config, dsn_for(str(dbname), user=role)).tick()
        assert [f.schedule for f in fired] == ["tick"]
        with psycopg.connect(dsn_for(str(dbname), user=role), autocommit=True) as conn:
            conn.execute("SELECT pgfleet.schedule_pause('tick')")
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as owner:
            owner.execute(f"DROP OWNED BY {role}")
        with admin() as server:
            server.execute(f"DROP ROLE {role}")
