"""The claims hold back after the database changed under the fleet (functions/epoch_check.sql).

The epoch row records the server's WAL timeline and system identifier as the claims last saw
them. A real failover is tried in tests/ha; here the row is made to disagree with the server,
as it does on a promoted replica, whose row still names the old primary's timeline."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

import pgfleet
from pgfleet.sql import fleet as fleet_store, store

Conn = psycopg.Connection[Any]


def epoch(conn: Conn) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM pgfleet.epoch")
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {column.name: value for column, value in zip(cur.description, row, strict=True)}


def server(conn: Conn) -> tuple[int, int]:
    row = conn.execute(
        "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int,"
        " (SELECT system_identifier FROM pg_control_system())").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_the_first_claim_records_the_server_and_the_longest_lease(conn: Conn) -> None:
    assert epoch(conn)["timeline"] is None
    pgfleet.enqueue(conn, "noop")
    assert len(store.claim(conn, queue="default", limit=1, worker="w", lease=45)) == 1
    timeline, system = server(conn)
    row = epoch(conn)
    assert (row["timeline"], row["system_id"], row["longest_lease"]) == (timeline, None, 45)
    # The maintenance process compares the system identifier too, and holds nothing back.
    assert fleet_store.epoch_check(conn, lease=30) is None
    assert (epoch(conn)["system_id"], epoch(conn)["longest_lease"]) == (system, 45)


def test_a_new_timeline_holds_every_claim_for_the_longest_lease(conn: Conn) -> None:
    pgfleet.enqueue(conn, "noop")
    store.claim(conn, queue="other", limit=1, worker="w", lease=60)  # records the server
    timeline, _ = server(conn)
    conn.execute("UPDATE pgfleet.epoch SET timeline = %s", (timeline - 1 or 7,))
    assert store.claim(conn, queue="default", limit=1, worker="w", lease=30) == []
    row = epoch(conn)
    now = fleet_store.db_now(conn)
    assert row["timeline"] == timeline and row["changed_at"] is not None
    # The longest lease any claim asked for (60 s), plus the margin of the kill (5 s).
    assert abs(row["claims_resume_at"] - (row["changed_at"] + timedelta(seconds=65))) \
        < timedelta(milliseconds=1)
    assert row["claims_resume_at"] - now > timedelta(seconds=60)
    # Every claim, of every queue and through the fused completion, waits.
    assert store.claim(conn, queue="default", limit=1, worker="w2", lease=30) == []
    assert store.complete_and_claim(conn, queue="default", done=[], limit=1, worker="w3",
                                    lease=30, held=0, held_solo=False) == (set(), [])
    assert fleet_store.epoch_check(conn, lease=30) == row["claims_resume_at"]
    # Once the hold is over (made to end now), the claims go on.
    conn.execute("UPDATE pgfleet.epoch SET claims_resume_at = now()")
    [job] = store.claim(conn, queue="default", limit=1, worker="w", lease=30)
    assert fleet_store.epoch_check(conn, lease=30) is None
    assert store.complete_succeeded(conn, worker="w", done=[(job.id, job.fence)]) == {job.id}


def test_another_system_identifier_holds_the_claims(conn: Conn) -> None:
    """A restore into another cluster keeps the row of the database it came from."""
    pgfleet.enqueue(conn, "noop")
    assert fleet_store.epoch_check(conn, lease=20) is None
    conn.execute("UPDATE pgfleet.epoch SET system_id = system_id + 1")
    assert fleet_store.epoch_check(conn, lease=20) is not None
    assert store.claim(conn, queue="default", limit=1, worker="w", lease=20) == []
    assert epoch(conn)["system_id"] == server(conn)[1]


def test_a_missing_row_is_made_again_without_a_hold(conn: Conn) -> None:
    conn.execute("DELETE FROM pgfleet.epoch")
    pgfleet.enqueue(conn, "noop")
    assert len(store.claim(conn, queue="default", limit=1, worker="w", lease=20)) == 1
    assert epoch(conn)["timeline"] == server(conn)[0]
