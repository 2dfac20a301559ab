from __future__ import annotations

import subprocess
import sys
import threading

import psycopg

from pgfleet import migrations


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
