"""The queues the arbiter gave up on, told to its maintenance process through shared
memory, which records them on the supervisor's row (processes.failed_queues) so `pgfleet
status` on any host sees them.

A state, not a stream of events: the maintenance process reads the whole set each pass,
so one that restarts, or that replaces its predecessor after a reload, still writes what
holds now. The arbiter is the only writer. A sequence number, odd while a write is under
way, lets the reader retry a read that overlapped one (the page has no lock: the arbiter
must never wait on a child).
"""

from __future__ import annotations

import json
import mmap
import struct

_HEADER = struct.Struct("QQ")  # sequence, length of the JSON that follows
SIZE = 64 * 1024
# A reason is cut to this length so that many failed queues still fit the page.
REASON_LIMIT = 200
# A read that keeps overlapping writes gives up (the next pass reads again).
READ_TRIES = 1000
UNREAD = -1


class FailedQueues:
    """Created by the arbiter before any fork; inherited by every child."""

    def __init__(self) -> None:
        self.memory = mmap.mmap(-1, SIZE)
        self.failed: dict[str, str] = {}
        self.sequence = 0

    def mark(self, queue: str, reason: str) -> None:
        """The arbiter: `queue` failed, for `reason`."""
        self.failed[queue] = reason[:REASON_LIMIT]
        self._write()

    def clear(self) -> None:
        """The arbiter, on reload: every queue gets a fresh start."""
        self.failed.clear()
        self._write()

    def _write(self) -> None:
        room = SIZE - _HEADER.size
        data = json.dumps(self.failed, sort_keys=True).encode()
        if len(data) > room:
            # Past a page of failures the reasons go, and the names that fit stay.
            shown: dict[str, str] = {}
            used = len(b"{}")
            for queue in sorted(self.failed):
                used += len(json.dumps(queue).encode()) + len(b': "failed", ')
                if used > room:
                    break
                shown[queue] = "failed"
            data = json.dumps(shown).encode()
        self.sequence += 1  # odd: writing
        _HEADER.pack_into(self.memory, 0, self.sequence, 0)
        self.memory[_HEADER.size:_HEADER.size + len(data)] = data
        self.sequence += 1  # even: done
        _HEADER.pack_into(self.memory, 0, self.sequence, len(data))

    def read(self) -> tuple[int, dict[str, str]]:
        """A child: (sequence, queue → reason) as the arbiter last wrote them, or
        (UNREAD, {}) if every try overlapped a write (an arbiter that died mid-write)."""
        for _ in range(READ_TRIES):
            sequence, length = _HEADER.unpack_from(self.memory, 0)
            data = bytes(self.memory[_HEADER.size:_HEADER.size + length])
            again, _ = _HEADER.unpack_from(self.memory, 0)
            if sequence % 2 == 0 and again == sequence:
                found = json.loads(data) if data else {}
                return sequence, {str(k): str(v) for k, v in found.items()}
        return UNREAD, {}
