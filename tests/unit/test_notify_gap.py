"""The gap a notification waits after a claim: none after a claim that found jobs (a job
enqueued alone starts one round trip after its commit) nor after a single empty claim (a
notification racing a claim often finds its job taken), NOTIFY_GAP after empty claims in a
row (a flood of notifications without jobs stays a bounded number of claims: the
integration test of that is
test_untrusted_input.test_a_notify_flood_costs_a_bounded_number_of_claims)."""

from pgfleet.worker.loop import EMPTY_CLAIMS_BEFORE_GAP, NOTIFY_GAP, notify_gap


def test_a_claim_that_found_jobs_leaves_no_gap() -> None:
    assert notify_gap(0) == 0.0


def test_one_empty_claim_leaves_no_gap() -> None:
    assert EMPTY_CLAIMS_BEFORE_GAP == 2
    assert notify_gap(1) == 0.0


def test_empty_claims_in_a_row_make_notifications_wait_the_gap() -> None:
    assert NOTIFY_GAP > 0
    assert notify_gap(2) == NOTIFY_GAP
    assert notify_gap(500) == NOTIFY_GAP
