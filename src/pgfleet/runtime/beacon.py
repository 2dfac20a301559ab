"""Heartbeats from children to the master through shared memory.

The master holds no database connection, so it cannot read the processes table. Before
forking it maps one anonymous shared page; each child writes its slot (monotonic time of
its last loop, jobs running) and the master reads every slot without a system call. The
master writes one field back: how many workers its queue now has (TTIN/TTOU), for the
child's process title. A worker that gives up its leases (pgfleet.worker.leases) marks its
slot before it exits, so the master can tell that deliberate exit from a task that merely
exits with the same code; one that never claimed a job marks that it held nothing, so no
rescue is asked for it. A worker also notes when it last sent a lease renewal that
succeeded, for its keeper (pgfleet.runtime.keeper), which inherits the page from it.
CLOCK_MONOTONIC is one clock for every process on the host, so the times compare.
"""

from __future__ import annotations

import mmap
import struct
import time

_BEAT = struct.Struct("dd")  # last beat (monotonic seconds), jobs running: the child's
_PEERS = struct.Struct("d")  # workers of the child's queue: the master's
_EXIT_MARK = struct.Struct("d")  # the child's exit mark: GAVE_UP, HELD_NOTHING or KEPT
GAVE_UP = 1.0  # it exits with jobs still leased to it, on purpose
HELD_NOTHING = 2.0  # it exits never having claimed a job: there is nothing to give back
KEPT = 3.0  # its keeper killed it: it held jobs on leases it had not renewed in time
_RENEWED = struct.Struct("d")  # the worker's: when its last good renewal was sent (0: none)
_EXIT_MARK_AT = _BEAT.size + _PEERS.size
_RENEWED_AT = _EXIT_MARK_AT + _EXIT_MARK.size
_SLOT_SIZE = _RENEWED_AT + _RENEWED.size
# Per executor thread, the last two jobs whose task it entered (0: none), after the beat
# slots; as many threads as a worker may have (QueueConfig.threads). Two, not one: a task
# that signals its own process (os.kill(os.getpid(), SIGSEGV)) returns before the signal
# lands, and its thread may already have taken the next job.
MAX_THREADS = 256
_JOB = struct.Struct("qq")
_JOBS_SIZE = MAX_THREADS * _JOB.size


class BeaconBoard:
    """Created by the master before any fork; inherited by every child."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.jobs_at = slots * _SLOT_SIZE
        # Anonymous shared memory: pages no worker writes are never allocated.
        self.memory = mmap.mmap(-1, max(mmap.PAGESIZE, self.jobs_at + slots * _JOBS_SIZE))

    def beacon(self, index: int) -> Beacon:
        return Beacon(self, index)

    def reset_unready(self, index: int) -> None:
        """Before a fork: the start counts as the first beat; -1 jobs means 'not ready'."""
        _BEAT.pack_into(self.memory, index * _SLOT_SIZE, time.monotonic(), -1.0)
        _EXIT_MARK.pack_into(self.memory, index * _SLOT_SIZE + _EXIT_MARK_AT, 0.0)
        _RENEWED.pack_into(self.memory, index * _SLOT_SIZE + _RENEWED_AT, 0.0)
        start = self.jobs_at + index * _JOBS_SIZE
        self.memory[start:start + _JOBS_SIZE] = bytes(_JOBS_SIZE)

    def set_peers(self, index: int, count: int) -> None:
        """The master: the child's queue now runs `count` workers."""
        _PEERS.pack_into(self.memory, index * _SLOT_SIZE + _BEAT.size, float(count))

    def was_ready(self, index: int) -> bool:
        """Did the child in this slot ever beat? A child that died before that failed
        to start (an import error, say), which the restart policy treats differently."""
        return self.read(index)[1] >= 0

    def gave_up_leases(self, index: int) -> bool:
        """Did the child in this slot mark that it gave up its leases (read after it died)?"""
        return self._exit_mark(index) == GAVE_UP

    def held_nothing(self, index: int) -> bool:
        """Did the child in this slot mark that it never claimed a job (read after it died)?"""
        return self._exit_mark(index) == HELD_NOTHING

    def killed_by_keeper(self, index: int) -> bool:
        """Did the keeper of the child in this slot kill it (read after it died)?"""
        return self._exit_mark(index) == KEPT

    def _exit_mark(self, index: int) -> float:
        (mark,) = _EXIT_MARK.unpack_from(self.memory, index * _SLOT_SIZE + _EXIT_MARK_AT)
        return float(mark)

    def running_jobs(self, index: int) -> list[int]:
        """The jobs whose task code the child in this slot ran last, two per thread (read
        after it died, so nothing writes meanwhile). A job among them may have ended; the
        rescue looks only at jobs still held, whose outcome was not committed."""
        start = self.jobs_at + index * _JOBS_SIZE
        return sorted({job for pair in _JOB.iter_unpack(self.memory[start:start + _JOBS_SIZE])
                       for job in pair if job})

    def read(self, index: int) -> tuple[float, int]:
        beat, busy = _BEAT.unpack_from(self.memory, index * _SLOT_SIZE)
        return beat, int(busy)

    def renewed(self, index: int) -> float:
        """When the child in this slot last sent a lease renewal that succeeded
        (monotonic seconds; 0: never)."""
        (at,) = _RENEWED.unpack_from(self.memory, index * _SLOT_SIZE + _RENEWED_AT)
        return float(at)


class Beacon:
    """A child's view of its own slot."""

    def __init__(self, board: BeaconBoard, index: int) -> None:
        self.board = board
        self.index = index

    def beat(self, busy: int) -> None:
        _BEAT.pack_into(self.board.memory, self.index * _SLOT_SIZE, time.monotonic(), float(busy))

    def running(self, thread: int, job_id: int) -> None:
        """Executor thread `thread` enters the task of `job_id`: it becomes the thread's
        last job, and the one before its previous. The config allows no more threads than
        MAX_THREADS; a thread beyond would go unnoted."""
        if thread < MAX_THREADS:
            at = self.board.jobs_at + self.index * _JOBS_SIZE + thread * _JOB.size
            last, _ = _JOB.unpack_from(self.board.memory, at)
            _JOB.pack_into(self.board.memory, at, job_id, last)

    def leases_renewed(self, at: float) -> None:
        """The worker's renewal sent at monotonic time `at` succeeded."""
        _RENEWED.pack_into(self.board.memory, self.index * _SLOT_SIZE + _RENEWED_AT, at)

    def holding(self) -> tuple[int, float]:
        """(jobs held at the last beat, when the last good renewal was sent), as its
        keeper reads them."""
        _, busy = self.board.read(self.index)
        return busy, self.board.renewed(self.index)

    def give_up_leases(self) -> None:
        """The worker is about to exit because it could not renew its leases."""
        self._mark_exit(GAVE_UP)

    def held_nothing(self) -> None:
        """The worker is about to exit without ever having claimed a job."""
        self._mark_exit(HELD_NOTHING)

    def kept(self) -> None:
        """The worker's keeper is about to kill it (pgfleet.runtime.keeper)."""
        self._mark_exit(KEPT)

    def _mark_exit(self, mark: float) -> None:
        _EXIT_MARK.pack_into(self.board.memory, self.index * _SLOT_SIZE + _EXIT_MARK_AT, mark)

    def peers(self) -> int:
        """Workers of this child's queue, as the master last wrote it."""
        (count,) = _PEERS.unpack_from(self.board.memory, self.index * _SLOT_SIZE + _BEAT.size)
        return int(count)
