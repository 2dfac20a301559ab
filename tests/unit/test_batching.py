"""Batch sizes without tuning: prefetch auto from the measured job time and round trip,
and when collected outcomes may wait for the next flush."""

from __future__ import annotations

from pgfleet.config import Config
from pgfleet.tasks import Registry
from pgfleet.worker.batching import FLUSH_DELAY, GIVE_BACK_EVERY, GIVE_BACK_SECONDS, Batching
from pgfleet.worker.prefetch import AUTO_CLAIM_CAP, PREFETCH_BYTES, STALE_AFTER, AutoPrefetch
from pgfleet.worker.settings import build_settings


def test_the_default_prefetch_is_auto() -> None:
    settings = build_settings(Config.model_validate({"queues": {"q": {}}}), "q", dsn="",
                              registry=Registry({}))
    assert settings.prefetch is None
    fixed = build_settings(Config.model_validate({"queues": {"q": {"prefetch": 7}}}), "q",
                           dsn="", registry=Registry({}))
    assert fixed.prefetch == 7


def test_nothing_is_prefetched_before_a_job_was_measured() -> None:
    auto = AutoPrefetch(threads=4)
    assert auto.value() == 0
    auto.round_trip(0.002)
    assert auto.value() == 0


def test_short_jobs_fill_the_claim_and_long_ones_get_no_prefetch() -> None:
    short = AutoPrefetch(threads=8)
    short.round_trip(0.002)
    short.jobs_ran([0.000005] * 50)
    assert short.value() == AUTO_CLAIM_CAP - 8
    long = AutoPrefetch(threads=8)
    long.round_trip(0.002)
    long.jobs_ran([2.0])
    assert long.value() == 0  # 8 threads x 2 round trips of 2 ms against 2 s jobs: 0.016
    one = AutoPrefetch(threads=1)
    one.round_trip(0.002)
    one.jobs_ran([0.001])
    assert one.value() == 4  # one thread runs 4 jobs of 1 ms in two round trips


def test_the_measure_follows_the_jobs() -> None:
    auto = AutoPrefetch(threads=2)
    auto.round_trip(0.002)
    auto.jobs_ran([0.000001])
    assert auto.value() == AUTO_CLAIM_CAP - 2
    for _ in range(60):
        auto.jobs_ran([5.0])
    assert auto.value() == 0


def test_outcomes_wait_only_while_every_thread_has_a_job_queued() -> None:
    batching = Batching(threads=4, prefetch=60, poll_interval=1.0)
    assert batching.capacity() == 64
    assert batching.may_defer(pending=3, waiting=4, since=10.0, now=10.0)
    assert not batching.may_defer(pending=3, waiting=3, since=10.0, now=10.0)
    assert not batching.may_defer(pending=32, waiting=30, since=10.0, now=10.0)
    assert not batching.may_defer(pending=3, waiting=30, since=10.0, now=10.0 + 2 * FLUSH_DELAY)


def test_big_args_bound_what_is_prefetched() -> None:
    """Claims of up to 1,000 tiny jobs hold each one's args until it runs: jobs of 1 MiB
    args would have held a GiB. Auto keeps the prefetch within PREFETCH_BYTES of args."""
    auto = AutoPrefetch(threads=8)
    auto.round_trip(0.002)
    auto.jobs_ran([0.000005] * 50)
    auto.jobs_claimed(args_bytes=50 * 20, jobs=50)  # small args: the cap applies
    assert auto.value() == AUTO_CLAIM_CAP - 8
    for _ in range(60):
        auto.jobs_claimed(args_bytes=10 * 1024 * 1024, jobs=10)  # 1 MiB each
    assert auto.value() == PREFETCH_BYTES // (1024 * 1024)
    auto.jobs_claimed(args_bytes=0, jobs=0)  # an empty claim tells nothing
    assert auto.value() == PREFETCH_BYTES // (1024 * 1024)


def test_a_worker_idle_for_a_while_forgets_what_it_measured() -> None:
    """Outside trial T9: tiny jobs measured, the queue quiet, then 100 jobs of 1 s: a
    claim sized by the old measure took 92 of them into one of two processes. Idle for
    STALE_AFTER, the worker starts again from no prefetch, as a new one does."""
    auto = AutoPrefetch(threads=8)
    auto.round_trip(0.002)
    auto.jobs_ran([0.000005] * 50)
    auto.jobs_claimed(args_bytes=1000, jobs=50)
    auto.holding(40, now=100.0)
    auto.holding(0, now=100.5)
    auto.holding(0, now=100.5 + STALE_AFTER / 2)
    assert auto.value() == AUTO_CLAIM_CAP - 8  # a short gap between jobs forgets nothing
    auto.holding(3, now=102.0)
    auto.holding(0, now=103.0)
    auto.holding(0, now=103.0 + STALE_AFTER)
    assert auto.value() == 0
    assert auto.args_bytes is None
    auto.jobs_ran([0.000005] * 8)  # measured again: prefetches again
    assert auto.value() == AUTO_CLAIM_CAP - 8


def test_auto_gives_back_only_what_is_a_second_of_work_beyond_what_it_wants() -> None:
    """Batching.held_too_long: prefetch auto gives back jobs claimed ahead once they turn
    out slow, not a few fast ones (a give-back costs a round trip and a claim again)."""
    batching = Batching(threads=2, prefetch=None, poll_interval=1.0)
    batching.auto.round_trip(0.002)
    batching.auto.jobs_ran([0.5])  # slow jobs: auto wants none ahead
    assert batching.prefetch() == 0
    # Held: two per thread (one running, one just claimed), and beyond them 0.5 s jobs
    # worth a second per thread, i.e. 4 of them.
    work = 4 + int(GIVE_BACK_SECONDS * 2 / 0.5)
    assert not batching.held_too_long(work - 1, now=100.0)
    assert batching.held_too_long(work, now=100.0)
    # Once per GIVE_BACK_EVERY at most.
    assert not batching.held_too_long(50, now=100.0 + GIVE_BACK_EVERY / 2)
    assert batching.held_too_long(50, now=100.0 + GIVE_BACK_EVERY)
    # One job waiting behind each running one is no reason: auto's want wavers by one.
    slow_one = Batching(threads=1, prefetch=None, poll_interval=1.0)
    slow_one.auto.round_trip(0.002)
    slow_one.auto.jobs_ran([5.0])
    assert not slow_one.held_too_long(2, now=100.0)
    assert slow_one.held_too_long(3, now=100.0)
    fast = Batching(threads=2, prefetch=None, poll_interval=1.0)
    fast.auto.round_trip(0.002)
    fast.auto.jobs_ran([0.001])  # fast jobs: 30 of them beyond auto's 4 is no reason
    assert not fast.held_too_long(4 + fast.prefetch() + 30, now=100.0)
    fixed = Batching(threads=2, prefetch=50, poll_interval=1.0)
    fixed.auto.jobs_ran([0.5])  # a fixed prefetch is the operator's choice: kept
    assert not fixed.held_too_long(50, now=100.0)
