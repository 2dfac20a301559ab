"""The compose example's roles, on a throwaway cluster: examples/compose/init-roles.sh as
the postgres image runs it, `pgfleet migrate` and `grants --apply` as the owner, the
supervisor's commands as the runtime role, each password given as PGPASSWORD."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.support.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
PSQL_DIR = "/usr/lib/postgresql/15/bin"


def pgfleet(cluster: Cluster, user: str, password: str,
            *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(PGFLEET_DATABASE_URL=f"postgresql://{user}@127.0.0.1:{cluster.port}/pgfleet",
               PGPASSWORD=password)
    return subprocess.run([sys.executable, "-m", "pgfleet", *argv], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT, check=False)


def test_the_owner_migrates_and_pgfleet_runs_as_the_runtime_role(cluster: Cluster) -> None:
    owner_pw, runtime_pw = uuid.uuid4().hex, uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(PATH=f"{PSQL_DIR}:{env['PATH']}", PGHOST="127.0.0.1", PGPORT=str(cluster.port),
               POSTGRES_USER="postgres", PGFLEET_OWNER_PASSWORD=owner_pw,
               PGFLEET_RUNTIME_PASSWORD=runtime_pw)
    init = subprocess.run(["sh", str(ROOT / "examples/compose/init-roles.sh")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert init.returncode == 0, init.stderr
    cluster.password_roles += ["pgfleet_owner", "pgfleet_runtime"]
    cluster.write_hba()
    cluster.reload()
    try:
        wrong = pgfleet(cluster, "pgfleet_owner", runtime_pw, "migrate")
        assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr
        done = pgfleet(cluster, "pgfleet_owner", owner_pw, "migrate")
        assert done.returncode == 0, done.stderr
        granted = pgfleet(cluster, "pgfleet_owner", owner_pw, "grants", "--runtime",
                          "pgfleet_runtime", "--apply")
        assert granted.returncode == 0, granted.stderr

        enqueued = pgfleet(cluster, "pgfleet_runtime", runtime_pw, "enqueue", "noop")
        assert enqueued.returncode == 0, enqueued.stderr
        status = pgfleet(cluster, "pgfleet_runtime", runtime_pw, "status", "--json")
        assert status.returncode == 0, status.stderr
        for password in (owner_pw, runtime_pw):
            assert password not in done.stderr + granted.stderr + status.stdout
        url = f"postgresql://pgfleet_runtime@127.0.0.1:{cluster.port}/pgfleet"
        with psycopg.connect(url, password=runtime_pw, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM pgfleet.jobs").fetchone() == (1,)
            for ddl in ("CREATE TABLE public.x (id int)", "CREATE TABLE pgfleet.x (id int)",
                        "DROP TABLE pgfleet.jobs"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(ddl)
        with cluster.admin() as conn:
            owner = conn.execute("SELECT pg_get_userbyid(datdba) FROM pg_database"
                                 " WHERE datname = 'pgfleet'").fetchone()
            supers = conn.execute("SELECT rolname FROM pg_roles WHERE rolsuper AND rolname"
                                  " LIKE 'pgfleet%'").fetchall()
        assert owner == ("pgfleet_owner",) and supers == []
    finally:
        cluster.password_roles = [r for r in cluster.password_roles
                                  if r not in ("pgfleet_owner", "pgfleet_runtime")]
        cluster.write_hba()
        cluster.reload()
        cluster.execute('DROP DATABASE IF EXISTS pgfleet WITH (FORCE)')
        cluster.execute("DROP ROLE IF EXISTS pgfleet_owner")
        cluster.execute("DROP ROLE IF EXISTS pgfleet_runtime")
