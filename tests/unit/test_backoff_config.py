"""One backoff type: the file's retry and restart policies become the runtime Backoff."""

from __future__ import annotations

import random

import pytest

from pgfleet.config import (
    BackoffConfig,
    ConfigError,
    QueueConfig,
    RestartBackoffConfig,
    SupervisorConfig,
    parse_config_text,
)
from pgfleet.core.backoff import Backoff


def test_retry_defaults_are_the_runtime_defaults() -> None:
    assert BackoffConfig().to_backoff() == Backoff()
    assert QueueConfig().backoff.to_backoff() == Backoff()


def test_a_queue_backoff_from_the_file_reaches_the_runtime_policy() -> None:
    text = "queues:\n  q:\n    backoff: {initial: 2s, max: 10m, factor: 3, jitter: 0}\n"
    config = parse_config_text(text, "pgfleet.yaml", {})
    backoff = config.queues["q"].backoff.to_backoff()
    assert backoff == Backoff(initial=2.0, max=600.0, factor=3.0, jitter=0.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 5, 6)] == [2.0, 6.0, 18.0, 162.0, 486.0]


def test_restart_delay_doubles_from_half_a_second_to_thirty() -> None:
    backoff = SupervisorConfig().restart_backoff.to_backoff()
    delays = [backoff.delay(failures) for failures in range(1, 10)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_restart_delay_after_thousands_of_failures_is_the_cap() -> None:
    # A helper (scheduler, exporter) is retried forever; 0.5 * 2 ** 1100 overflows a float.
    assert SupervisorConfig().restart_backoff.to_backoff().delay(5000) == 30.0


def test_a_partial_restart_backoff_keeps_the_restart_defaults() -> None:
    text = "queues: {q: {}}\nsupervisor:\n  restart_backoff: {initial: 2s}\n"
    restart = parse_config_text(text, "pgfleet.yaml", {}).supervisor.restart_backoff
    assert restart == RestartBackoffConfig(initial=2.0)
    assert (restart.max, restart.factor, restart.jitter) == (30.0, 2.0, 0.0)


def test_restart_jitter_from_the_file_spreads_the_delay() -> None:
    text = "queues: {q: {}}\nsupervisor:\n  restart_backoff: {initial: 10s, jitter: 0.5}\n"
    backoff = parse_config_text(text, "pgfleet.yaml", {}).supervisor.restart_backoff.to_backoff()
    delays = {backoff.delay(1, random.Random(seed)) for seed in range(20)}
    assert len(delays) > 1 and all(5.0 <= delay <= 15.0 for delay in delays)


@pytest.mark.parametrize(
    "where", ["queues: {q: {backoff: BODY}}", "supervisor: {restart_backoff: BODY}"]
)
def test_max_below_initial_is_one_line_at_max(where: str) -> None:
    text = "queues: {q: {}}\n" if where.startswith("supervisor") else ""
    text += where.replace("BODY", "{initial: 1m, max: 10s}") + "\n"
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, "pgfleet.yaml", {})
    (error,) = caught.value.errors
    assert error.endswith("max: max (10s) must be at least initial (1m)")
