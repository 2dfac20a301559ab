"""The arbiter's page of failed queues, as a forked child reads it."""

from __future__ import annotations

import json
import os

from pgfleet.runtime.failed_queues import SIZE, FailedQueues


def read_in_child(page: FailedQueues) -> tuple[int, dict[str, str]]:
    """What a child forked now reads from the page, brought back through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.write(write_end, json.dumps(page.read()).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        sequence, failed = json.loads(handle.read())
    os.waitpid(pid, 0)
    return sequence, failed


def test_marks_written_after_the_fork_reach_the_child() -> None:
    page = FailedQueues()
    assert page.read() == (0, {})
    page.mark("emails", "workers crashed 10 times within 300s")
    first, failed = read_in_child(page)
    assert failed == {"emails": "workers crashed 10 times within 300s"}
    page.mark("reports", "workers died at start-up 5 times in a row")
    second, failed = read_in_child(page)
    assert second > first and set(failed) == {"emails", "reports"}
    page.clear()
    third, failed = read_in_child(page)
    assert third > second and failed == {}


def test_a_page_of_failures_keeps_the_names_that_fit() -> None:
    page = FailedQueues()
    for index in range(SIZE // 100):
        page.mark(f"q{index:04d}-" + "x" * 100, "r" * 150)
    _, failed = page.read()
    assert failed and set(failed.values()) == {"failed"}
    assert len(json.dumps(failed)) <= SIZE
