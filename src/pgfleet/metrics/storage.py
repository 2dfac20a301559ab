"""Multiprocess metric files that cannot kill their process.

prometheus-client maps each process's metric file into memory and grows it by truncation.
On a full filesystem the file is sparse, and the first write to a page without a block
behind it raises SIGBUS: the process dies without a line. A read-only directory raises
from whichever metric call touches a file first. Here every byte is allocated on disk
before it is mapped, so a full filesystem is an ENOSPC instead, and any failure turns the
process's metrics off: its values stay in memory, exported nowhere, and one error line
says so. Jobs never notice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from prometheus_client import values
from prometheus_client.mmap_dict import MmapedDict

log = logging.getLogger("pgfleet.metrics")

# prometheus-client's first size of a file (mmap_dict._INITIAL_MMAP_SIZE).
INITIAL_SIZE = 1 << 16
# Bytes of one entry beyond its key: its length, up to 8 of padding, two doubles.
ENTRY_OVERHEAD = 4 + 8 + 16

_off_in: int | None = None  # the pid of a process whose metrics are off


def metrics_off() -> bool:
    return _off_in == os.getpid()


def turn_off(path: str, exc: OSError) -> None:
    """Metrics off for this process; the first failure of a process is logged, once."""
    global _off_in
    if not metrics_off():
        _off_in = os.getpid()
        log.error("metrics disabled in process %d: cannot write %s: %s", os.getpid(), path,
                  exc.strerror or exc)


class VoidFile:
    """Where a process's values go once its metrics are off."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[float, float]] = {}

    def read_value(self, key: str) -> tuple[float, float]:
        return self.values.get(key, (0.0, 0.0))

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        self.values[key] = (value, timestamp)

    def read_all_values(self) -> Iterator[tuple[str, float, float]]:
        return iter(())

    def close(self) -> None:
        pass


class ReservedFile(MmapedDict):
    """prometheus-client's file, with its blocks allocated before they are mapped."""

    def __init__(self, filename: str) -> None:
        self.void = VoidFile()
        with open(filename, "a+b") as f:
            size = os.fstat(f.fileno()).st_size
            os.posix_fallocate(f.fileno(), 0, max(size, INITIAL_SIZE))
        super().__init__(filename)  # type: ignore[no-untyped-call]

    def _room_for(self, key: str) -> bool:
        """Allocate what storing a new `key` may grow the file to; False (metrics off)
        when the filesystem refuses."""
        needed = self._used + len(key.encode("utf-8")) + ENTRY_OVERHEAD
        capacity = self._capacity
        while needed > capacity:
            capacity *= 2
        try:
            if capacity > self._capacity:
                os.posix_fallocate(self._f.fileno(), 0, capacity)
        except OSError as exc:
            turn_off(self._fname, exc)
            return False
        return True

    def _usable(self, key: str) -> bool:
        if metrics_off():
            return False
        return key in self._positions or self._room_for(key)

    def read_value(self, key: str) -> tuple[float, float]:
        if not self._usable(key):
            return self.void.read_value(key)
        found: tuple[float, float] = super().read_value(key)  # type: ignore[no-untyped-call]
        return found

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        if not self._usable(key):
            self.void.write_value(key, value, timestamp)
            return
        super().write_value(key, value, timestamp)  # type: ignore[no-untyped-call]


def open_file(filename: str) -> ReservedFile | VoidFile:
    """What prometheus-client opens for each metric file of this process."""
    if metrics_off():
        return VoidFile()
    try:
        return ReservedFile(filename)
    except OSError as exc:
        turn_off(filename, exc)
        return VoidFile()


def install() -> None:
    """Make prometheus-client open its files through `open_file` (it looks the name up
    at each file it opens, so this holds for every metric, before or after)."""
    values.MmapedDict = open_file  # type: ignore[attr-defined,assignment]
