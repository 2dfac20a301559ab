"""The claim's cost must not grow with the backlog or with history (DESIGN, Data)."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from pgfleet import store


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


def test_claim_plan_uses_the_partial_index_with_millions_of_rows(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, run_at)"
            " SELECT 'default', 'noop', '{}', now() - interval '1 hour' + g * interval '1 ms'"
            " FROM generate_series(1, 1000000) g")
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, finished_at, attempt)"
            " SELECT 'default', 'noop', 'succeeded', now(), 1 FROM generate_series(1, 1000000)")
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
        with conn.transaction(force_rollback=True):
            cur = conn.execute(
                b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store.q("claim"),
                {"queue": "default", "limit": 10, "worker": "w", "lease": 60.0,
                 "args_limit": 1024 * 1024})
            row = cur.fetchone()
            assert row is not None
            raw = row[0]
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    every = nodes(plan)
    kinds = [n["Node Type"] for n in every]
    scans = [n for n in every if n["Node Type"] == "Index Scan"
             and n.get("Index Name") == "jobs_claim_idx"]
    assert scans, kinds
    assert "Seq Scan" not in kinds and "Sort" not in kinds, kinds
    assert any(n["Node Type"] == "LockRows" for n in every)
    # Only about the batch size is read: no walk over the backlog or the history.
    assert scans[0]["Actual Rows"] <= 20
    assert plan["Actual Rows"] == 10
    assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < 500
