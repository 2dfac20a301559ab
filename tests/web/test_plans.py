"""The jobs page's query plans on a history far larger than a page: the unfiltered and the
running-only pages read an index in order, every other filter reads one bounded range of
the primary key (sql/web.sql, pgfleet.web.pages)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgfleet.web import pages, queries
from pgfleet.web.app import configure_connection

HISTORY = 200_000


@pytest.fixture
def history(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, state, attempt, finished_at,"
            " last_error)"
            " SELECT (ARRAY['a','b','c'])[1 + i %% 3], 'task_' || (i %% 20),"
            "        jsonb_build_object('customer', i),"
            "        (CASE WHEN i %% 100 = 0 THEN 'dead' ELSE 'succeeded' END)::pgfleet.job_state,"
            "        1, now(), CASE WHEN i %% 100 = 0 THEN 'boom' END"
            "   FROM generate_series(1, %s) i", (HISTORY,))
        conn.execute("INSERT INTO pgfleet.jobs (queue, task) SELECT 'a', 'fresh'"
                     " FROM generate_series(1, 500)")
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
    return dsn


def plan(dsn: str, where: queries.JobFilter, before: int | None, floor: int) -> str:
    params: dict[str, Any] = {
        "before": queries.BIGINT_MAX if before is None else before, "floor": floor,
        "limit": 51, "state": where.state, "queue": where.queue, "task": where.task,
        "pattern": queries.like_pattern(where.text) if where.text else None,
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        configure_connection(conn)
        rows = conn.execute(b"EXPLAIN " + queries.jobs_page_sql(), params).fetchall()
    return "\n".join(row[0] for row in rows)


def test_unfiltered_and_running_pages_read_an_index(history: str) -> None:
    newest = plan(history, queries.JobFilter(), None, 0)
    assert "Index Scan Backward using jobs_pkey" in newest and "Seq Scan" not in newest
    deep = plan(history, queries.JobFilter(), HISTORY // 2, 0)
    assert "Index Scan Backward using jobs_pkey" in deep and "Seq Scan" not in deep
    running = plan(history, queries.JobFilter(state="running"), None, 0)
    assert "Seq Scan" not in running
    assert "jobs_lease_holder_idx" in running or "jobs_lease_expiry_idx" in running


@pytest.mark.parametrize("where", [
    queries.JobFilter(state="dead"),
    queries.JobFilter(state="dead", queue="b"),
    queries.JobFilter(queue="c"),
    queries.JobFilter(task="task_3"),
    queries.JobFilter(text='"customer": 4242'),
    queries.JobFilter(state="succeeded", queue="a", task="task_1", text="42"),
], ids=["dead", "dead-of-a-queue", "queue", "task", "text", "everything"])
def test_filtered_pages_read_one_range_of_the_primary_key(history: str,
                                                          where: queries.JobFilter) -> None:
    assert not pages.served_by_index(where)
    size = pages.TEXT_WINDOW if where.text else pages.FILTER_WINDOW
    top = HISTORY + 501
    text = plan(history, where, top, top - size)
    assert "using jobs_pkey" in text and "Seq Scan" not in text, text
    assert f"id < {top}" in text and f"id >= {top - size}" in text, text
