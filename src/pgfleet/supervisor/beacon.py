"""Heartbeats from children to the master through shared memory.

The master holds no database connection, so it cannot read the processes table. Before
forking it maps one anonymous shared page; each child writes its slot (monotonic time of
its last loop, jobs running) and the master reads every slot without a system call.
CLOCK_MONOTONIC is one clock for every process on the host, so the times compare.
"""

from __future__ import annotations

import mmap
import struct
import time

_SLOT = struct.Struct("dd")  # last beat (monotonic seconds), jobs running


class BeaconBoard:
    """Created by the master before any fork; inherited by every child."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.memory = mmap.mmap(-1, max(mmap.PAGESIZE, slots * _SLOT.size))

    def beacon(self, index: int) -> Beacon:
        return Beacon(self, index)

    def reset_unready(self, index: int) -> None:
        """Before a fork: the start counts as the first beat; -1 jobs means 'not ready'."""
        _SLOT.pack_into(self.memory, index * _SLOT.size, time.monotonic(), -1.0)

    def was_ready(self, index: int) -> bool:
        """Did the child in this slot ever beat? A child that died before that failed
        to start (an import error, say), which the restart policy treats differently."""
        return self.read(index)[1] >= 0

    def read(self, index: int) -> tuple[float, int]:
        beat, busy = _SLOT.unpack_from(self.memory, index * _SLOT.size)
        return beat, int(busy)


class Beacon:
    """A child's view of its own slot."""

    def __init__(self, board: BeaconBoard, index: int) -> None:
        self.board = board
        self.index = index

    def beat(self, busy: int) -> None:
        _SLOT.pack_into(self.board.memory, self.index * _SLOT.size, time.monotonic(), float(busy))
