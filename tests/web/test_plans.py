"""The jobs page's query plans on a history far larger than a page: the unfiltered page
and the pages of running, dead and cancelled jobs (of any queue or one) read an index in
id order; every other filter reads one bounded range of the primary key (sql/web.sql,
pgfleet.web.paging, migration 0012)."""

from __future__ import annotations

import psycopg
import pytest

from pgfleet.web import lists as queries, paging
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
    params = queries.jobs_page_params(where, before, floor, 51)
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


@pytest.mark.parametrize(("where", "index"), [
    (queries.JobFilter(state="dead"), "jobs_ended_badly_idx"),
    (queries.JobFilter(state="cancelled"), "jobs_ended_badly_idx"),
    (queries.JobFilter(state="dead", queue="b"), "jobs_ended_badly_queue_idx"),
    (queries.JobFilter(state="cancelled", queue="nosuch"), "jobs_ended_badly_queue_idx"),
], ids=["dead", "cancelled", "dead-of-a-queue", "cancelled-of-a-queue"])
def test_dead_and_cancelled_pages_read_their_index_in_id_order(
        history: str, where: queries.JobFilter, index: str) -> None:
    assert paging.served_by_index(where)
    for before in (None, HISTORY // 2):
        text = plan(history, where, before, 0)
        assert f"Index Scan Backward using {index}" in text, text
        assert "Sort" not in text and "Seq Scan" not in text, text


@pytest.mark.parametrize("where", [
    queries.JobFilter(state="succeeded"),
    queries.JobFilter(state="queued", queue="a"),
    queries.JobFilter(queue="c"),
    queries.JobFilter(task="task_3"),
    queries.JobFilter(text='"customer": 4242'),
    queries.JobFilter(state="succeeded", queue="a", task="task_1", text="42"),
], ids=["succeeded", "queued-of-a-queue", "queue", "task", "text", "everything"])
def test_filtered_pages_read_one_range_of_the_primary_key(history: str,
                                                          where: queries.JobFilter) -> None:
    assert not paging.served_by_index(where)
    size = paging.TEXT_FIRST_WINDOW if where.text else paging.FIRST_WINDOW
    top = HISTORY + 501
    text = plan(history, where, top, top - size)
    # The primary key, or an index holding the id (waiting jobs: the claim index), with
    # the window's bounds in its condition: never the whole table.
    assert "Index Scan" in text and "Seq Scan" not in text, text
    assert f"id <= {top - 1}" in text and f"id >= {top - size}" in text, text


@pytest.mark.parametrize("where", [
    queries.JobFilter(state="dead", task="task_0"),
    queries.JobFilter(state="dead", text="boom"),
], ids=["task", "text"])
def test_a_dead_page_with_a_task_or_text_reads_only_dead_rows_of_its_window(
        history: str, where: queries.JobFilter) -> None:
    assert not paging.served_by_index(where)
    text = plan(history, where, HISTORY, HISTORY - paging.MAX_WINDOW)
    assert "jobs_ended_badly_idx" in text and "Seq Scan" not in text, text


def test_the_windows_fit_the_time_left() -> None:
    # 10,000 ids in 10 ms: 90 ms left reads 72,000 more at that pace, but growth is capped.
    assert paging.next_window(10_000, 0.010, 10_000) == 72_000
    assert paging.next_window(10_000, 0.001, 10_000) == 100_000  # GROWTH
    assert paging.next_window(10_000_000, 0.001, 1_000_000) == paging.MAX_WINDOW
    assert paging.next_window(10_000, 0.1, 10_000) == 0  # budget spent
    assert paging.next_window(10_000, 0.095, 10_000) < paging.MIN_WINDOW


def explain(dsn: str, name: str, params: dict[str, object]) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        configure_connection(conn)
        rows = conn.execute(b"EXPLAIN " + queries._statements()[name], params).fetchall()
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize("queue", [None, "a"], ids=["fleet", "queue"])
def test_the_charts_read_a_bounded_stretch_of_the_finished_index(
        history: str, queue: str | None) -> None:
    # Every job of the history finished in the last hour: the read stops at its bound.
    text = explain(history, "activity", {"queue": queue, "rows": queries.ACTIVITY_ROWS})
    assert "Index Scan Backward using jobs_finished_idx" in text, text
    assert "Limit" in text and "Seq Scan" not in text, text
    with psycopg.connect(history, autocommit=True) as conn:
        activity = queries.activity(conn, queue)
    assert activity.rows_read == queries.ACTIVITY_ROWS and activity.cut_short


def test_running_jobs_are_read_from_their_partial_index(history: str) -> None:
    for name, params in (("running_jobs", {"queue": "a", "limit": 20}),
                         ("held_jobs", {"holders": ["h:1:w", "h:2:w"], "per_worker": 10})):
        text = explain(history, name, params)
        assert "Seq Scan on jobs" not in text, text
