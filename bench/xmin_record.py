"""Start records of `python -m bench.xmin`, written by the processes that run the jobs.

A task calls `record(enqueued_at)` first thing: the wall clock now and the latency since
the producer stamped the job go into a buffer, and a thread of the process appends the
buffer to `$BENCH_XMIN_DIR/<pid>.rec` every FLUSH_SECONDS. No database write per job, so
the measurement adds no load to the queue it measures. Producer and workers run on the
same host, so one wall clock serves both ends.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

FLUSH_SECONDS = 0.2
DIR_ENV = "BENCH_XMIN_DIR"


class Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="xmin-recorder", daemon=True)
        self.thread.start()

    def add(self, enqueued_at: float) -> None:
        now = time.time()
        line = f"{now:.6f} {(now - enqueued_at) * 1000.0:.3f}\n"
        with self.lock:
            self.lines.append(line)

    def flush(self) -> None:
        with self.lock:
            lines, self.lines = self.lines, []
        if lines:
            with open(self.path, "a") as fh:
                fh.write("".join(lines))

    def _run(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            self.flush()


_recorder: Recorder | None = None
_pid = 0
_guard = threading.Lock()


def recorder() -> Recorder:
    """This process's recorder; a forked child makes its own (the parent's thread did not
    survive the fork)."""
    global _recorder, _pid
    if _recorder is None or _pid != os.getpid():
        with _guard:
            if _recorder is None or _pid != os.getpid():
                folder = Path(os.environ[DIR_ENV])
                _recorder = Recorder(folder / f"{os.getpid()}.rec")
                _pid = os.getpid()
    return _recorder


def record(enqueued_at: float) -> None:
    recorder().add(enqueued_at)
