"""The claim's byte budget (migration 0025): a claim takes due rows in claim order only
while the args of the rows before each stay under max_bytes, always the first, and says
when it left due rows behind (`more`), compressed args measured by their text."""

from __future__ import annotations

import secrets
from typing import Any

import psycopg

import pgfleet
from pgfleet.sql import store

SIZE = 200_000
BUDGET = 1024 * 1024  # five rows of SIZE before the sixth: six fit, not seven


def claim(conn: psycopg.Connection[Any], limit: int = 100,
          max_bytes: int | None = BUDGET) -> list[store.ClaimedJob]:
    return store.claim(conn, queue="default", limit=limit, worker="w", lease=60.0,
                       max_bytes=max_bytes)


def stored_compressed(conn: psycopg.Connection[Any]) -> list[bool]:
    rows = conn.execute("SELECT pg_column_compression(args) IS NOT NULL FROM pgfleet.jobs"
                        " ORDER BY id").fetchall()
    return [row[0] for row in rows]


def test_a_claim_stops_at_its_byte_budget_and_says_it_left_jobs(
        conn: psycopg.Connection[Any]) -> None:
    # Random hex does not compress: measured by its stored size.
    ids = pgfleet.enqueue_many(conn, [{"task": "t", "args": {"blob": secrets.token_hex(SIZE // 2)}}
                                      for _ in range(10)])
    assert not any(stored_compressed(conn))
    first = claim(conn)
    assert [job.id for job in first] == ids[:6]
    assert all(job.more for job in first)
    rest = claim(conn)
    assert [job.id for job in rest] == ids[6:]
    assert not any(job.more for job in rest)  # the four left fit: nothing left behind


def test_compressed_args_count_at_their_text_size_not_their_stored_size(
        conn: psycopg.Connection[Any]) -> None:
    """200 kB of one letter is stored in ~2 kB; the worker holds 200 kB of text."""
    ids = pgfleet.enqueue_many(conn, [{"task": "t", "args": {"blob": "x" * SIZE}}] * 10)
    assert all(stored_compressed(conn))
    assert [job.id for job in claim(conn)] == ids[:6]


def test_the_first_job_is_claimed_whatever_its_size(conn: psycopg.Connection[Any]) -> None:
    ids = pgfleet.enqueue_many(conn, [{"task": "t", "args": {"blob": "x" * SIZE}}] * 3)
    jobs = claim(conn, max_bytes=1000)
    assert [job.id for job in jobs] == ids[:1] and jobs[0].more


def test_no_budget_and_small_args_take_the_whole_limit(conn: psycopg.Connection[Any]) -> None:
    pgfleet.enqueue_many(conn, [{"task": "t", "args": {"blob": "x" * SIZE}}] * 10)
    assert len(claim(conn, max_bytes=None)) == 10
    small = pgfleet.enqueue_many(conn, [{"task": "t", "args": {"i": i}} for i in range(500)])
    jobs = claim(conn, limit=300)
    assert [job.id for job in jobs] == small[:300]
    assert not any(job.more for job in jobs)  # stopped by the limit, not the budget


def test_the_fused_completion_and_claim_keeps_the_budget(conn: psycopg.Connection[Any]) -> None:
    ids = pgfleet.enqueue_many(conn, [{"task": "t", "args": {"blob": "x" * SIZE}}] * 10)
    first = claim(conn, limit=1)
    done, jobs = store.complete_and_claim(
        conn, queue="default", done=[(first[0].id, first[0].fence)], limit=100,
        worker="w", lease=60.0, held=0, held_solo=False, max_bytes=BUDGET)
    assert done == {first[0].id}
    assert [job.id for job in jobs] == ids[1:7] and jobs[0].more


def test_a_worker_of_the_previous_version_still_claims(conn: psycopg.Connection[Any]) -> None:
    """docs/deploying.md: migrations are additive. 0018's signatures stay, with no budget."""
    ids = pgfleet.enqueue_many(conn, [{"task": "t", "args": {"blob": "x" * SIZE}}] * 10)
    rows = conn.execute(
        "SELECT id FROM pgfleet.claim_jobs('default', 100, 'old', 60.0, 1048576, 0, false,"
        " NULL, NULL, NULL)").fetchall()
    assert sorted(row[0] for row in rows) == ids
    more = pgfleet.enqueue_many(conn, [{"task": "t"}] * 3)
    rows = conn.execute(
        "SELECT done, id FROM pgfleet.complete_and_claim_jobs(%s::bigint[], %s::jsonb,"
        " '{}'::jsonb, 'default', 100, 'old', 60.0, 1048576, 0, false, NULL, NULL, NULL)",
        ([ids[0]], f'{{"{ids[0]}": 1}}')).fetchall()
    assert rows[0] == ([ids[0]], None)
    assert sorted(row[1] for row in rows[1:]) == more
