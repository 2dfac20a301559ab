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
                 "args_limit": 1024 * 1024, "held": None, "held_solo": None,
                 "after_priority": None, "after_run_at": None, "after_id": None})
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


def test_a_claim_past_its_last_key_skips_the_dead_entries_of_claimed_jobs(dsn: str) -> None:
    """200,000 jobs claimed (and finished) leave their entries at the head of the claim
    index until a vacuum; a claim that starts past the last claimed key reads only about
    its own batch."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, run_at)"
            " SELECT 'default', 'noop', '{}', now() - interval '1 hour' + g * interval '1 ms'"
            " FROM generate_series(1, 300000) g")
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
        conn.execute("SET plan_cache_mode = force_custom_plan")
        last = None
        for _ in range(200):
            jobs = store.claim(conn, queue="default", limit=1000, worker="w", lease=60,
                               held=0, held_solo=False, after=last)
            assert len(jobs) == 1000
            last = max((j.priority, j.run_at, j.id) for j in jobs)
            store.complete_succeeded(conn, worker="w", done=[(j.id, j.attempt) for j in jobs])
        assert last is not None
        with conn.transaction(force_rollback=True):
            cur = conn.execute(
                b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store.q("claim"),
                {"queue": "default", "limit": 100, "worker": "w", "lease": 60.0,
                 "args_limit": 1024 * 1024, "held": 0, "held_solo": False,
                 "after_priority": last[0], "after_run_at": last[1], "after_id": last[2]})
            row = cur.fetchone()
            assert row is not None
            raw = row[0]
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    assert plan["Actual Rows"] == 100
    [scan] = [n for n in nodes(plan) if n.get("Index Name") == "jobs_claim_idx"]
    # The head holds 200,000 dead entries (over 1,000 index pages); past them: a few pages
    # (measured: 4), where a claim from the head reads them all until a vacuum.
    assert scan["Actual Rows"] == 100
    assert scan["Shared Hit Blocks"] + scan.get("Shared Read Blocks", 0) < 50


def completion_params(jobs: list[store.ClaimedJob]) -> dict[str, Any]:
    return {"worker": "w", **store.done_params([(j.id, j.attempt) for j in jobs], None),
            "queue": "default", "limit": 200, "lease": 60.0, "args_limit": 1024 * 1024,
            "held": 0, "held_solo": False, "after_priority": None, "after_run_at": None,
            "after_id": None}


def test_a_completion_compares_each_job_once_without_statistics(dsn: str) -> None:
    """A backlog inserted and not yet analyzed (a fresh queue, every drain of the bench):
    the planner expects about one running row. Joined with unnest() of the batch, that
    made a nested loop comparing every running row with every job of the batch (200 x 200)
    and re-reading the arrays 200 times; the completions must look each job up once."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_custom_plan")
        conn.execute("INSERT INTO pgfleet.jobs (queue, task) SELECT 'default', 'noop'"
                     " FROM generate_series(1, 100000)")
        jobs = store.claim(conn, queue="default", limit=200, worker="w", lease=60,
                           held=0, held_solo=False)
        for name in ("complete_and_claim", "complete_succeeded"):
            with conn.transaction(force_rollback=True):
                cur = conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + store.q(name),
                                   completion_params(jobs))
                row = cur.fetchone()
                assert row is not None
                raw = row[0]
            plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
            every = nodes(plan)
            assert sum(n.get("Rows Removed by Join Filter", 0) for n in every) == 0, name
            assert all(n["Actual Loops"] == 1 for n in every
                       if n["Node Type"] == "Function Scan"), name
            completed = [n for n in every if n["Node Type"] == "ModifyTable"
                         and n["Actual Rows"] == 200]
            assert completed, name
