"""enqueue_async / enqueue_many_async on a psycopg AsyncConnection: in the caller's
transaction (a rollback leaves nothing), with enqueue's checks and fields."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.errors import PayloadError, PgfleetError
from tests.support.workers import scalar


def in_loop(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_rolled_back_enqueue_async_leaves_nothing(dsn: str) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction(
                force_rollback=True):
            await pgfleet.enqueue_async(conn, "noop", {"a": 1})
            await pgfleet.enqueue_many_async(conn, [{"task": "noop"}] * 3)
            cur = await conn.execute("SELECT count(*) FROM pgfleet.jobs")
            assert (await cur.fetchone()) == (4,)  # visible inside the transaction
    in_loop(scenario())
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def test_a_committed_enqueue_async_keeps_every_field(dsn: str) -> None:
    async def scenario() -> tuple[int, list[int]]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            async with conn.transaction():
                one = await pgfleet.enqueue_async(
                    conn, "noop", {"a": 1}, queue="mail", priority=-3, delay=60,
                    max_attempts=4, unique_key="k1", meta={"tenant": "t1"})
                many = await pgfleet.enqueue_many_async(conn, [
                    {"task": "noop", "unique_key": "k1"},  # the held key: the same job
                    {"task": "noop", "args": {"b": 2}, "unique_key": "k2"},
                    {"task": "noop"},
                ])
            return one, many
    one, many = in_loop(scenario())
    assert many[0] == one and len(set(many)) == 3
    row = scalar(dsn, "SELECT row(queue, priority, max_attempts, unique_key, meta::text,"
                 " run_at > now() + interval '50 seconds')::text FROM pgfleet.jobs"
                 " WHERE id = %s", (one,))
    assert row == '(mail,-3,4,k1,"{""tenant"": ""t1""}",t)'
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 3


def test_enqueue_async_checks_like_enqueue(dsn: str) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            with pytest.raises(PayloadError, match="args"):
                await pgfleet.enqueue_async(conn, "noop", {"x": object()})
            with pytest.raises(PayloadError, match=r"jobs\[1\]\.task"):
                await pgfleet.enqueue_many_async(conn, [{"task": "noop"}, {}])
            with pytest.raises(TypeError, match="nope"):
                await pgfleet.enqueue_async(conn, "noop", nope=1)
    in_loop(scenario())
    with pytest.raises(PgfleetError, match=r"takes a psycopg\.AsyncConnection"):
        in_loop(pgfleet.enqueue_async(dsn, "noop"))  # type: ignore[arg-type]
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0
