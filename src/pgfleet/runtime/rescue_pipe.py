"""The pipe on which the arbiter names its dead workers to the maintenance process, which
gives their jobs back at once instead of at lease expiry. One line per worker:
`WORKER_ID<TAB>HOW<TAB>REASON<TAB>RUNNING`. HOW is `died` (a crash, a kill, an exit the
worker did not choose) or `gave_up` (the worker exited on purpose because it could not
renew its leases: its jobs are given back refunded, not counted as crashed). RUNNING is
the comma-separated ids of the jobs whose task code the worker's threads were in when it
died (empty: none; the field absent: unknown, so every job it held counts as running)."""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections import deque
from typing import NamedTuple


class RescueRequest(NamedTuple):
    worker: str
    reason: str
    running: list[int] | None  # None: not known, every held job counts as running
    gave_up: bool = False


class RescuePipe:
    """Created by the arbiter before any fork; each side keeps the end it uses."""

    def __init__(self, keep_for: float = 0.0) -> None:
        self.read_fd, self.write_fd = os.pipe()
        # The arbiter must never block on a full pipe; the lease expiry is the fallback.
        os.set_blocking(self.write_fd, False)
        # What was asked within keep_for seconds (a lease: after it the lease watch takes
        # over), to ask again of a new maintenance process (resend).
        self.keep_for = keep_for
        self.sent: deque[tuple[float, bytes]] = deque()

    def request(self, worker_id: str, reason: str, running: list[int] | None, *,
                gave_up: bool = False) -> bool:
        """Arbiter side: ask for the rescue of `worker_id`, which exited for `reason` (in
        the words of exit_codes.exit_reason); False if the pipe is full. The reason sent is
        the jobs' error: `worker died: SIGKILL`, or `given back: the worker could not renew
        its leases`."""
        error = f"given back: the worker {reason}" if gave_up else f"worker died: {reason}"
        line = f"{worker_id}\t{'gave_up' if gave_up else 'died'}\t{error}"
        if running is not None:
            ids = f"{line}\t{','.join(map(str, running))}"
            # A write up to PIPE_BUF is whole or nothing; a longer one could be torn by a
            # nearly full pipe. Beyond it (hundreds of threads), say "unknown" instead.
            line = ids if len(ids) < select.PIPE_BUF else line
        data = f"{line}\n".encode()
        if not self._write(data):
            return False
        self.sent.append((time.monotonic(), data))
        return True

    def _forget_old(self) -> None:
        horizon = time.monotonic() - self.keep_for
        while self.sent and self.sent[0][0] < horizon:
            self.sent.popleft()

    def resend(self) -> int:
        """Arbiter side, after the maintenance process exited without saying it gave
        back what it was asked (say, killed while a lock held its statement): ask its
        successor again for what was asked within keep_for, so those jobs do not wait for
        lease expiry, which charges every job held, even those that never ran. A give-back
        is fenced by the dead worker's id and a running state, so one already done finds
        nothing. Returns how many requests were written again."""
        self._forget_old()
        written = 0
        for _, data in self.sent:
            if not self._write(data):
                break
            written += 1
        return written

    def _write(self, data: bytes) -> bool:
        try:
            os.write(self.write_fd, data)
        except BlockingIOError:
            return False
        return True

    def close(self, *, keep_reader: bool = False) -> None:
        """In a child: the maintenance process keeps the read end, the others neither."""
        for fd in (self.write_fd,) if keep_reader else (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class RescueReader:
    """The maintenance process's end."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.buffer = b""

    def read(self) -> list[RescueRequest]:
        """Maintenance side: the complete requests available now."""
        try:
            chunk = os.read(self.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return []
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        found = []
        for line in lines:
            worker, _, rest = line.decode("utf-8", "replace").partition("\t")
            how, _, rest = rest.partition("\t")
            reason, tab, ids = rest.partition("\t")
            if worker:
                running = [int(i) for i in ids.split(",") if i.isdigit()] if tab else None
                found.append(RescueRequest(worker, reason or "worker died", running,
                                           how == "gave_up"))
        return found
