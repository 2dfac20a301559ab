"""Dead workers whose process groups are not empty yet.

A worker that died (SIGKILL, the OOM killer) may leave behind the processes its jobs
started. They run the jobs' side effects as long as they live, so the jobs are handed to
rescue only once no process of the worker's group is left: until then they stay leased
to the dead worker and nobody else can start them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pgfleet.runtime.process_groups import kill_group

log = logging.getLogger("pgfleet.supervisor")

Item = TypeVar("Item")
# After this long, a group that does not empty is reported (once).
WARN_AFTER = 5.0


@dataclass
class _Entry(Generic[Item]):
    item: Item
    since: float
    warned: bool = False


class Draining(Generic[Item]):
    """Process groups (a dead worker's pid) to empty, each with what to do once empty."""

    def __init__(self, on_empty: Callable[[Item], None]) -> None:
        self.groups: dict[int, _Entry[Item]] = {}
        self.on_empty = on_empty

    def __bool__(self) -> bool:
        return bool(self.groups)

    def add(self, pgid: int, item: Item) -> None:
        self.groups[pgid] = _Entry(item, time.monotonic())

    def step(self) -> None:
        """SIGKILL what is left of each group; call on_empty for each group found empty
        (its members reaped: as a subreaper the supervisor reaps them all). A group that
        never empties keeps its jobs leased only up to a lease: the lease watch of any
        host then rescues them, as for a vanished host."""
        for pgid, entry in list(self.groups.items()):
            try:
                alive = kill_group(pgid)
            except OSError as exc:
                # EPERM: members this process may not signal. They keep the jobs leased;
                # the lease watch rescues them after a lease at the latest.
                if not entry.warned:
                    log.warning("cannot kill process group %d: %s", pgid, exc)
                    entry.warned = True
                alive = True
            if not alive:
                del self.groups[pgid]
                self.on_empty(entry.item)
            elif not entry.warned and time.monotonic() - entry.since > WARN_AFTER:
                entry.warned = True
                log.warning("processes of dead worker %d's group survive SIGKILL; its jobs "
                            "wait for them", pgid)

    def kill_all(self, workers: list[int]) -> None:
        """The supervisor's emergency exit: SIGKILL the groups of these live workers and
        of the dead ones."""
        for pgid in [*self.groups, *workers]:
            try:
                kill_group(pgid)
            except OSError:
                log.exception("could not kill process group %d", pgid)

    def give_up(self) -> None:
        for pgid in self.groups:
            log.error("process group %d did not die; its jobs are left to the lease watch",
                      pgid)
        self.groups.clear()
