"""Rescue on demand, for tests that stage a takeover."""

from __future__ import annotations

from typing import Any

import psycopg

from pgfleet.sql import rescue as rescue_store


def rescue_all(conn: psycopg.Connection[Any]) -> list[int]:
    """What maintenance does once its lease watch saw every running lease unrenewed for a
    whole lease; returns the ids rescued (a row locked by another transaction is skipped)."""
    return [job_id for job_id, _, _ in rescue_store.rescue_stale(
        conn, leases=rescue_store.running_leases(conn))]
