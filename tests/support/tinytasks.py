"""A task that does nothing at all (no audit row): a backlog of these makes prefetch auto
claim in large batches, as a drain of no-op jobs does."""

from __future__ import annotations

import pgfleet


@pgfleet.task(name="tiny")
def tiny() -> None:
    """Nothing."""
