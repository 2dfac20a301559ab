"""Executor.withdraw_waiting: which held jobs a worker gives back without running them
(a graceful stop: all; prefetch auto: all but what it still wants), and that one whose
give-back was not committed is offered again until it is (Executor.unreturned)."""

from __future__ import annotations

from datetime import UTC, datetime

from pgfleet.sql.rows import ClaimedJob
from pgfleet.tasks import Registry
from pgfleet.worker.executor import Executor


def _held(count: int) -> Executor:
    executor = Executor(queue="q", worker_id="w", args_limit=1024, wake=lambda: None)
    for job_id in range(1, count + 1):
        executor.admit(ClaimedJob(id=job_id, task="t", args="{}", attempt=1, max_attempts=3,
                                  args_size=2, wait_seconds=0.0, solo=False, priority=0,
                                  run_at=datetime.now(UTC)), Registry({}), 10.0)
    return executor


def test_all_but_the_first_kept_are_withdrawn_and_started_ones_never() -> None:
    executor = _held(6)
    executor.running[1].started = 1.0  # a thread runs job 1
    assert executor.withdraw_waiting(keep=2) == {4, 5, 6}  # 2 and 3 kept, in claim order
    assert all(executor.running[i].withdrawn for i in (4, 5, 6))
    assert not any(executor.running[i].withdrawn for i in (1, 2, 3))
    assert executor.withdraw_waiting() == {2, 3, 4, 5, 6}


def test_a_withdrawal_not_yet_given_back_is_offered_again_until_released() -> None:
    executor = _held(4)
    assert executor.withdraw_waiting(keep=1) == {2, 3, 4}
    # The give-back failed (the database was away): the next call offers them again,
    # whatever it would keep now.
    assert executor.unreturned == {2, 3, 4}
    assert executor.withdraw_waiting(keep=10) == {2, 3, 4}
    for job_id in (2, 3, 4):
        executor.release(job_id)
    assert executor.unreturned == set() and set(executor.running) == {1}
    assert executor.withdraw_waiting(keep=10) == set()
