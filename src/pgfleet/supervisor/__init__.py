"""The supervisor of one host (`pgfleet run`): the arbiter and what it shares with its
children (beacons, the rescue pipe, exit codes)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # `from pgfleet.supervisor import Supervisor` keeps working, but the children (which
    # import exit_codes and beacon from this package) never load the arbiter.
    if name == "Supervisor":
        from pgfleet.supervisor.arbiter import Supervisor

        return Supervisor
    raise AttributeError(name)
