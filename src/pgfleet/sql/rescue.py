"""The store's functions for the rescues: what a dead worker held and giving it back, and
the leases a watcher finds unrenewed for a whole lease. One function per named query, run
by the runners of pgfleet/sql/store.py, like the store itself."""

from __future__ import annotations

from collections.abc import Sequence

from pgfleet.sql.rows import HeldJob, HolderRescue, Lease, RescuedJob
from pgfleet.sql.store import MAX_REFUNDS, Conn, _many


def held_by(conn: Conn, *, worker: str) -> list[HeldJob]:
    return _many(conn, "held_by", {"worker": worker}, HeldJob)


def rescue_holder(conn: Conn, *, worker: str, error: str, delays: dict[int, float],
                  shared: bool, running: list[int] | None = None) -> list[HolderRescue]:
    """Give back a dead worker's jobs (those of `delays`). A job whose task ran last (in
    `running`; every job when it is None) is due after its delay and charged an attempt
    unless `shared`; any other is due at once, never charged."""
    return _many(conn, "rescue_holder",
                 {"worker": worker, "error": error, "ids": list(delays),
                  "delays": list(delays.values()), "shared": shared, "running": running},
                 HolderRescue)


def rescue_gave_up(conn: Conn, *, worker: str, error: str,
                   running: list[int] | None) -> list[HolderRescue]:
    """Give back the jobs of a worker that exited because it could not renew its leases:
    a job whose task ran in it (in `running`; every job when None) is refunded like a
    stopping worker's give-back (up to MAX_REFUNDS times), never counted as a crash; any
    other is due at once, never charged."""
    return _many(conn, "rescue_gave_up",
                 {"worker": worker, "error": error, "running": running,
                  "max_refunds": MAX_REFUNDS}, HolderRescue)


def running_leases(conn: Conn) -> list[Lease]:
    """The lease of every running job, for pgfleet.maintenance.lease_watch."""
    return _many(conn, "running_leases", {}, Lease)


def rescue_stale(conn: Conn, *, leases: Sequence[Lease]) -> list[tuple[int, str, str]]:
    """Give back the jobs of `leases` that are still exactly as seen (not renewed, not
    claimed again since): (id, queue, new state) of each."""
    if not leases:
        return []
    params = {"ids": [x.id for x in leases], "holders": [x.holder for x in leases],
              "fences": [x.fence for x in leases], "beats": [x.beats for x in leases]}
    rows = _many(conn, "rescue_stale", params, RescuedJob)
    return [(row.id, row.queue, row.state) for row in rows]
