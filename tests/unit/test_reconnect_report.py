"""How a run of failed connection attempts is logged (pgfleet.runtime.child.Reconnect.report):
each error the run has not seen at WARNING, a few at most, repeats at DEBUG. Outside
trial T12: a worker's connection was killed, then its password rotated; only the first
error was ever logged, so the reason it could not come back never showed."""

from __future__ import annotations

import logging

import pytest

from pgfleet.runtime.child import MAX_REPORTED_ERRORS, Reconnect

log = logging.getLogger("pgfleet.test.reconnect")


def _report(reconnect: Reconnect, error: str) -> None:
    reconnect.report(log, "lost its database connection", error, reconnect.failed())


def _said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage().rsplit(": ", 1)[1]) for r in caplog.records]


def test_each_new_error_of_a_run_is_a_warning_and_repeats_are_debug(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=log.name)
    reconnect = Reconnect()
    for error in ("connection killed", "refused", "refused", "password failed", "refused"):
        _report(reconnect, error)
    assert _said(caplog) == [(logging.WARNING, "connection killed"),
                             (logging.WARNING, "refused"), (logging.DEBUG, "refused"),
                             (logging.WARNING, "password failed"), (logging.DEBUG, "refused")]


def test_a_run_says_a_few_errors_at_most_and_a_success_starts_a_new_run(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=log.name)
    reconnect = Reconnect()
    for index in range(MAX_REPORTED_ERRORS + 2):
        _report(reconnect, f"error {index}")
    levels = [level for level, _ in _said(caplog)]
    assert levels == [logging.WARNING] * MAX_REPORTED_ERRORS + [logging.DEBUG] * 2
    caplog.clear()
    assert reconnect.succeeded()
    _report(reconnect, "error 0")
    assert _said(caplog) == [(logging.WARNING, "error 0")]
