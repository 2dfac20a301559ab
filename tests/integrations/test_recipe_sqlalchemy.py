"""The SQLAlchemy recipe of docs/integrations.md, run as written: a sync and an async
session each commit an order with its job; a session that rolls back leaves neither;
pgfleet.testing.run_jobs then runs the jobs, whose task updates the orders."""

from __future__ import annotations

from pathlib import Path

from tests.integrations.recipes import environment, run, write_project
from tests.support.workers import scalar

DRIVER = """
import asyncio

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

import pgfleet
import pgfleet.testing
from shop.db import Base, Order, async_engine, engine
from shop.orders import place_order, place_order_async

Base.metadata.create_all(engine)
place_order("sync@example.com")
asyncio.run(place_order_async("async@example.com"))


async def rolled_back_async():
    async with AsyncSession(async_engine) as session:
        async with session.begin():
            session.add(Order(email="rolled-async@example.com"))
            await session.flush()
            raw = await (await session.connection()).get_raw_connection()
            await pgfleet.enqueue_async(raw.driver_connection, "shop.tasks.send_receipt", {})
            await session.rollback()
    await async_engine.dispose()

asyncio.run(rolled_back_async())
with Session(engine) as session:
    session.add(Order(email="rolled@example.com"))
    session.flush()
    pgfleet.enqueue(session.connection().connection.driver_connection,
                    "shop.tasks.send_receipt", {})
    session.rollback()

with engine.connect() as conn:
    outcomes = pgfleet.testing.run_jobs(conn.connection.driver_connection,
                                        tasks=["shop.tasks"])
    conn.commit()
print(sorted(o.state for o in outcomes))
"""


def test_sqlalchemy_recipe(dsn: str, tmp_path: Path) -> None:
    write_project("SQLAlchemy", tmp_path)
    (tmp_path / "driver.py").write_text(DRIVER)
    done = run(tmp_path, environment(dsn), "driver.py")
    assert done.stdout.strip() == "['succeeded', 'succeeded']"
    assert scalar(dsn, "SELECT array_agg(email ORDER BY id) FROM orders WHERE receipt_sent"
                  ) == ["sync@example.com", "async@example.com"]
    assert scalar(dsn, "SELECT count(*) FROM orders") == 2
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 2
