"""The restart policy: start-up failures in a row per queue (per kind for the helpers),
crashes of running workers per queue within a window, backoff between restarts, and a
queue given up on after too many of either."""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from pgfleet import metrics
from pgfleet.config import Config
from pgfleet.runtime.failed_queues import FailedQueues
from pgfleet.supervisor.children import Slot, label

log = logging.getLogger("pgfleet.supervisor")


@dataclass
class QueueHealth:
    """Start-up failures in a row, recent crashes and when the next start may happen."""

    failures: int = 0
    not_before: float = 0.0
    failed: bool = False
    crashes: deque[float] = field(default_factory=deque)


def health_key(slot: Slot) -> str:
    """Start failures are counted per queue for workers and per kind for the helpers."""
    return slot.queue if slot.kind == "worker" and slot.queue is not None else f"@{slot.kind}"


class Restarts:
    def __init__(self) -> None:
        self.health: dict[str, QueueHealth] = {}
        # What the maintenance process records in the database for `pgfleet status`.
        self.failed = FailedQueues()

    def may_start(self, slot: Slot, now: float) -> bool:
        health = self.health.setdefault(health_key(slot), QueueHealth())
        return not health.failed and now >= health.not_before

    def record_exit(self, config: Config, slot: Slot, reason: str, was_ready: bool) -> None:
        """A child of `slot` exited (not retired, not during a stop)."""
        health = self.health.setdefault(health_key(slot), QueueHealth())
        if slot.queue is not None:
            metrics.worker_restarts.labels(slot.queue, reason).inc()
        if was_ready:
            health.failures = 0
            health.not_before = 0.0
            if reason == "crashed" and slot.kind == "worker":
                self._record_crash(config, slot, health)
            return
        health.failures += 1
        policy = config.supervisor
        queue = health_key(slot)
        # Only a queue is given up on; the helpers keep retrying at the capped delay.
        if health.failures >= policy.max_start_failures and slot.kind == "worker":
            health.failed = True
            metrics.queue_failed.labels(queue).set(1)
            self.failed.mark(queue, f"workers died at start-up {health.failures} times in "
                                    f"a row")
            log.error("queue %r failed: its workers died at start-up %d times in a row; "
                      "not restarting it (the other queues keep running; HUP to retry)",
                      queue, health.failures)
            return
        delay = policy.restart_backoff.to_backoff().delay(health.failures)
        health.not_before = time.monotonic() + delay
        log.warning("%s failed at start-up (%d in a row); next start in %.1fs",
                    label(slot), health.failures, delay)

    def _record_crash(self, config: Config, slot: Slot, health: QueueHealth) -> None:
        """A worker that had started died (a signal or an unexpected exit code): its
        successor waits like after a start failure, and too many crashes within the
        window fail the queue, so a poison job cannot make it crash-loop."""
        limit = config.supervisor.crash_limit
        now = time.monotonic()
        health.crashes.append(now)
        while health.crashes[0] < now - limit.window:
            health.crashes.popleft()
        queue = health_key(slot)
        if len(health.crashes) >= limit.count:
            health.failed = True
            metrics.queue_failed.labels(queue).set(1)
            self.failed.mark(queue, f"workers crashed {len(health.crashes)} times within "
                                    f"{limit.window:.0f}s")
            log.error("queue %r failed: its workers crashed %d times within %.0fs; not "
                      "restarting it (the other queues keep running; HUP to retry)",
                      queue, len(health.crashes), limit.window)
            return
        delay = config.supervisor.restart_backoff.to_backoff().delay(len(health.crashes))
        health.not_before = now + delay
        log.warning("%s crashed (%d within %.0fs); next start in %.1fs", label(slot),
                    len(health.crashes), limit.window, delay)

    def reset(self) -> None:
        """On reload: every queue gets a fresh start."""
        for key in self.health:
            if not key.startswith("@"):
                metrics.queue_failed.labels(key).set(0)
        self.health.clear()
        self.failed.clear()
