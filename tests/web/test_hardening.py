"""The UI under load and attack: a planted operator, slow clients, searches over huge
rows, a busy pool, weak tokens and guessed credentials."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import psycopg

from tests.support.roles import login_roles, plant_trap, trap_hits
from tests.web.conftest import WebServer, dead_job, insert_job


def test_an_operator_planted_in_public_never_runs_in_the_ui(
        web: Callable[..., WebServer], dsn: str) -> None:
    job_id = dead_job(dsn)
    insert_job(dsn)
    with login_roles(dsn) as make:
        plant_trap(dsn, make("attacker"))
        server = web()
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for path in ("/", "/jobs", "/jobs?state=dead", "/jobs?state=queued&task=noop",
                         "/jobs?q=boom", f"/jobs/{job_id}", "/schedules"):
                assert client.get(path).status_code == 200, path
        server.stop()
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert trap_hits(conn) == []
