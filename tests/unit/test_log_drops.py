"""The log path never blocks the thread that logs: beyond the queue, lines are dropped and
the count is written once the reader drains again."""

from __future__ import annotations

import io
import logging
import threading
import time

from pgfleet.runtime.logs import DroppingHandler


class StalledStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flowing = threading.Event()

    def write(self, text: str) -> int:
        self.flowing.wait()
        return super().write(text)


def test_a_stalled_reader_costs_lines_not_time() -> None:
    stream = StalledStream()
    handler = DroppingHandler(stream, capacity=5)
    logger = logging.Logger("drops")
    logger.addHandler(handler)
    start = time.monotonic()
    for n in range(50):
        logger.warning("line %d", n)
    assert time.monotonic() - start < 1.0
    assert handler.dropped >= 40  # the writer holds one line, the queue five
    stream.flowing.set()
    handler.drain(5.0)
    logger.warning("after")
    handler.drain(5.0)
    text = stream.getvalue()
    assert f"{handler.dropped} log lines dropped: stderr was not read" in text
    assert text.rstrip().endswith("after")
