"""The arbiter's requests to the maintenance process: which worker died, why, which jobs
its threads were running (none, some, or not known), and whether it gave up its leases."""

from __future__ import annotations

import os
import time

from pgfleet.runtime.beacon import MAX_THREADS, BeaconBoard
from pgfleet.runtime.rescue_pipe import RescuePipe, RescueReader, RescueRequest


def test_requests_carry_the_running_jobs_or_say_they_are_unknown() -> None:
    pipe = RescuePipe()
    try:
        reader = RescueReader(pipe.read_fd)
        assert pipe.request("host:1:a", "SIGKILL", [7, 9])
        assert pipe.request("host:2:b", "SIGSEGV", [])
        assert pipe.request("host:3:c", "SIGKILL", None)
        # Too many ids for one whole write: sent as unknown rather than torn.
        assert pipe.request("host:4:d", "SIGKILL", list(range(10**9, 10**9 + 500)))
        assert pipe.request("host:5:e", "could not renew its leases", [3], gave_up=True)
        assert reader.read() == [
            RescueRequest("host:1:a", "worker died: SIGKILL", [7, 9], False),
            RescueRequest("host:2:b", "worker died: SIGSEGV", [], False),
            RescueRequest("host:3:c", "worker died: SIGKILL", None, False),
            RescueRequest("host:4:d", "worker died: SIGKILL", None, False),
            RescueRequest("host:5:e", "given back: the worker could not renew its leases",
                          [3], True)]
    finally:
        os.close(pipe.read_fd)
        pipe.close()


def test_what_was_asked_within_a_lease_is_asked_again_of_a_new_maintenance() -> None:
    """Outside trial T11: a maintenance process killed while a lock held its give-back
    took the request with it, and the dead workers' jobs ended dead by lease expiry."""
    pipe = RescuePipe(keep_for=0.5)
    try:
        reader = RescueReader(pipe.read_fd)
        assert pipe.request("host:1:a", "SIGKILL (heartbeat stale)", [7, 9])
        time.sleep(0.6)  # older than keep_for: the lease watch's now
        assert pipe.request("host:2:b", "SIGKILL (heartbeat stale)", [3])
        asked = reader.read()  # the maintenance process that is then killed
        assert [r.worker for r in asked] == ["host:1:a", "host:2:b"]
        assert pipe.resend() == 1
        assert reader.read() == [asked[1]]  # its successor reads the recent one again
    finally:
        os.close(pipe.read_fd)
        pipe.close()


def test_the_board_keeps_the_last_two_jobs_of_each_thread_until_the_slot_is_reused() -> None:
    board = BeaconBoard(4)
    beacon = board.beacon(2)
    beacon.running(0, 41)
    beacon.running(5, 42)
    beacon.running(MAX_THREADS - 1, 43)
    beacon.running(0, 44)  # thread 0's previous job stays noted: 41
    beacon.running(0, 45)  # now 45 and 44; 41 is forgotten
    assert board.running_jobs(2) == [42, 43, 44, 45]
    assert board.running_jobs(1) == []
    board.reset_unready(2)  # the next child forked into the slot starts clean
    assert board.running_jobs(2) == []


def test_a_worker_that_gives_up_its_leases_marks_its_slot_until_it_is_reused() -> None:
    board = BeaconBoard(4)
    board.reset_unready(1)
    assert not board.gave_up_leases(1)
    board.beacon(1).give_up_leases()
    assert board.gave_up_leases(1)
    assert not board.gave_up_leases(0) and not board.gave_up_leases(2)
    board.beacon(1).beat(3)  # beats and peers do not touch the mark
    board.set_peers(1, 2)
    assert board.gave_up_leases(1)
    board.reset_unready(1)
    assert not board.gave_up_leases(1)
