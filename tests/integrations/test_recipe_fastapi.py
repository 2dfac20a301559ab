"""The FastAPI recipe of docs/integrations.md, run as written: a request commits its
order and its job through enqueue_async on the request's connection; a request that
fails after the enqueue leaves neither."""

from __future__ import annotations

from pathlib import Path

from tests.integrations.recipes import environment, run, write_project
from tests.support.workers import scalar

DRIVER = """
from pathlib import Path

import psycopg
from fastapi.testclient import TestClient

import pgfleet.testing
from shop.api import app

import os
with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
    conn.execute(Path("schema.sql").read_text())

with TestClient(app) as client:
    good = client.post("/orders", params={"email": "a@example.com"})
    bad = client.post("/orders", params={"email": "not-an-address"})
print(good.status_code, bad.status_code)

with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
    print([o.state for o in pgfleet.testing.run_jobs(conn, tasks=["shop.tasks"])])
"""


def test_fastapi_recipe(dsn: str, tmp_path: Path) -> None:
    write_project("FastAPI", tmp_path)
    (tmp_path / "driver.py").write_text(DRIVER)
    done = run(tmp_path, environment(dsn), "driver.py")
    assert done.stdout.split("\n")[:2] == ["200 422", "['succeeded']"], done.stdout
    assert scalar(dsn, "SELECT array_agg(email) FROM orders WHERE receipt_sent"
                  ) == ["a@example.com"]
    assert scalar(dsn, "SELECT count(*) FROM orders") == 1
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 1
