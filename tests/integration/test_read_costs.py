"""The fleet's reads (`pgfleet status`, the web overview, the exporter) cost the same with
a long job history or a large backlog: they read partial-index entries of the queues they
describe, never the whole jobs table; the xmin horizon and claim cost reads read none."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from pgfleet.sql import fleet as fleet_store, store

# A read of a handful of queues touches a few index pages per queue; a scan of the
# million rows below would read over 17,000 buffers.
FEW_BUFFERS = 1000

LIMITS = """
INSERT INTO pgfleet.queue_limits (queue, global_concurrency, key_concurrency, rate_limit,
                                  rate_period, published_by, updated_at)
VALUES ('capped', 5, NULL, NULL, NULL, 'test', now()),
       ('keyed', NULL, 2, NULL, NULL, 'test', now()),
       ('rated', 3, NULL, 10, 1, 'test', now())
"""


def plan(conn: psycopg.Connection[Any], name: str) -> tuple[int, list[str]]:
    """The buffers one run of a named query touches, and the nodes of its plan."""
    [[explained]] = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store.queries()[name]).fetchall()
    top = explained[0]["Plan"]
    nodes: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(f"{node['Node Type']} {node.get('Relation Name', '')}".strip())
        for child in node.get("Plans", []):
            walk(child)
    walk(top)
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"], nodes


def test_flow_usage_does_not_read_the_job_history(conn: psycopg.Connection[Any]) -> None:
    conn.execute(LIMITS)
    conn.execute("""
        INSERT INTO pgfleet.jobs (queue, task, state, finished_at, concurrency_key)
        SELECT (ARRAY['default', 'capped', 'keyed', 'rated'])[1 + i % 4], 'noop', 'succeeded',
               now() - interval '1 hour', 'k' || i % 7
          FROM generate_series(1, 1000000) i""")
    conn.execute("""
        INSERT INTO pgfleet.jobs (queue, task, concurrency_key)
        SELECT (ARRAY['capped', 'keyed', 'rated'])[1 + i % 3], 'noop', 'k' || i % 5
          FROM generate_series(1, 30) i""")
    conn.execute("ANALYZE pgfleet.jobs")
    buffers, nodes = plan(conn, "flow_usage")
    assert "Seq Scan jobs" not in nodes
    assert buffers < FEW_BUFFERS, json.dumps(nodes)
    # The horizon's holders and the claim's costs read the server's views and statistics,
    # never a job row: a million finished jobs cost them nothing.
    for name in ("xmin_holders", "claim_costs"):
        buffers, nodes = plan(conn, name)
        assert not [node for node in nodes if node.endswith(" jobs")], (name, nodes)
        assert buffers < FEW_BUFFERS, (name, buffers, nodes)
    assert fleet_store.claim_costs(conn).claim_index_bytes > 0
    usage = {u.queue: u for u in fleet_store.flow_usage(conn)}
    assert sorted(usage) == ["capped", "keyed", "rated"]
    assert [usage[q].due for q in sorted(usage)] == [10, 10, 10]
    assert usage["capped"].held_by_global == 5
    # keyed: ten due jobs over five keys, two of each allowed to start: none held.
    assert usage["keyed"].held_by_key == 0


def test_counts_and_oldest_wait_do_not_read_the_whole_backlog(
        conn: psycopg.Connection[Any]) -> None:
    conn.execute(LIMITS)
    # 1,000,000 waiting over three priorities: a tenth in a limited queue with keys, all
    # due; a fifth of the others due tomorrow.
    conn.execute("""
        INSERT INTO pgfleet.jobs (queue, task, priority, run_at, concurrency_key)
        SELECT CASE WHEN i % 10 = 0 THEN 'keyed' ELSE 'big' END, 'noop', i % 3,
               now() - (i % 1000) * interval '1 s'
                     + CASE WHEN i % 5 = 1 THEN interval '1 day' ELSE interval '0' END,
               'k' || i % 9
          FROM generate_series(1, 1000000) i""")
    conn.execute("INSERT INTO pgfleet.jobs (queue, task, run_at) VALUES"
                 " ('small', 'noop', now() - interval '1 minute'),"
                 " ('small', 'noop', now() + interval '1 hour')")
    # As autovacuum leaves a standing backlog (PostgreSQL vacuums after inserts): its
    # pages all-visible, so the bounded counts read index pages only.
    conn.execute("VACUUM ANALYZE pgfleet.jobs")
    for name in ("queue_counts", "oldest_waiting", "flow_usage"):
        buffers, nodes = plan(conn, name)
        assert "Seq Scan jobs" not in nodes, name
        assert buffers < FEW_BUFFERS, (name, buffers, nodes)
    counts = {(q, state): n for q, state, n in fleet_store.queue_counts(conn)}
    over = fleet_store.COUNT_BOUND + 1
    assert counts == {("big", "queued"): over, ("big", "scheduled"): over,
                      ("keyed", "queued"): over,
                      ("small", "queued"): 1, ("small", "scheduled"): 1}
    oldest = fleet_store.oldest_waiting(conn)
    assert sorted(oldest) == ["big", "keyed", "small"]
    assert 999 <= oldest["big"] < 1100 and 990 <= oldest["keyed"] < 1100
    assert 60 <= oldest["small"] < 120


@pytest.mark.parametrize("waiting", [10_000, 10_001])
def test_a_count_is_exact_up_to_its_bound(conn: psycopg.Connection[Any], waiting: int) -> None:
    # Spread over every priority, so the count's bound holds across them.
    conn.execute("""
        INSERT INTO pgfleet.jobs (queue, task, priority, state, finished_at)
        SELECT 'q', 'noop', i %% 2001 - 1000, 'dead', now() FROM generate_series(1, %s) i""",
                 (waiting,))
    conn.execute("""
        INSERT INTO pgfleet.jobs (queue, task, priority)
        SELECT 'q', 'noop', i %% 2001 - 1000 FROM generate_series(1, %s) i""", (waiting,))
    counts = {(q, state): n for q, state, n in fleet_store.queue_counts(conn)}
    assert counts == {("q", "queued"): waiting, ("q", "dead"): waiting}
