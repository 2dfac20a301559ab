"""The pipe on which the arbiter names its dead workers to the maintenance process, which
gives their jobs back at once instead of at lease expiry. One line per worker:
`WORKER_ID<TAB>REASON`."""

from __future__ import annotations

import contextlib
import os


class RescuePipe:
    """Created by the arbiter before any fork; each side keeps the end it uses."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        # The arbiter must never block on a full pipe; the lease expiry is the fallback.
        os.set_blocking(self.write_fd, False)

    def request(self, worker_id: str, reason: str) -> bool:
        """Arbiter side: ask for the rescue of `worker_id`; False if the pipe is full."""
        try:
            os.write(self.write_fd, f"{worker_id}\t{reason}\n".encode())
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

    def read(self) -> list[tuple[str, str]]:
        """Maintenance side: the complete requests available now, as (worker, reason)."""
        try:
            chunk = os.read(self.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return []
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        found = []
        for line in lines:
            worker, _, reason = line.decode("utf-8", "replace").partition("\t")
            if worker:
                found.append((worker, reason or "worker died"))
        return found
