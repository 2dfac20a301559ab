"""The pure parts of task control: Snooze and Retry arguments, retry_on rules, the result
and progress encodings."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pgfleet
from pgfleet.context import JobContext
from pgfleet.core import payload
from pgfleet.errors import PayloadError, PgfleetError
from pgfleet.tasks import Task


def test_snooze_and_retry_take_seconds_or_a_timedelta_within_a_year() -> None:
    assert pgfleet.Snooze(timedelta(minutes=2)).seconds == 120.0
    assert pgfleet.Retry(delay=1.5).delay == 1.5
    assert pgfleet.Retry().delay is None
    for bad in (-1, float("nan"), 400 * 86400, "5", True):
        with pytest.raises(ValueError, match="expected seconds between 0 and"):
            pgfleet.Snooze(bad)  # type: ignore[arg-type]


def _task(retry_on: object) -> Task:
    def fn() -> None: ...
    return pgfleet.task(name=f"rules.{id(retry_on)}", retry_on=retry_on)(fn)  # type: ignore[call-overload,no-any-return]


def test_retry_on_classes_a_class_or_a_function() -> None:
    assert Task(name="t", fn=print).retries(KeyError())  # no rule: everything retries
    listed = _task((ConnectionError, TimeoutError))
    assert listed.retries(ConnectionResetError()) and not listed.retries(KeyError())
    assert _task(OSError).retries(ConnectionError()) and not _task(OSError).retries(ValueError())
    decided = _task(lambda exc: "again" in str(exc))
    assert decided.retries(RuntimeError("try again")) and not decided.retries(RuntimeError("x"))

    def broken(exc: BaseException) -> bool:
        raise ZeroDivisionError

    assert not _task(broken).retries(RuntimeError())
    for bad in ((ValueError, "nope"), 42):
        with pytest.raises(PgfleetError, match="retry_on: expected"):
            _task(bad)


def test_a_result_must_be_json_within_the_limit() -> None:
    assert payload.value_json("result", {"a": [1, None]}, 100) == '{"a":[1,null]}'
    assert payload.value_json("result", "text", 100) == '"text"'
    with pytest.raises(PayloadError, match="result: is not JSON-serialisable"):
        payload.value_json("result", {"when": object()}, 100)
    with pytest.raises(PayloadError, match="over the limit of 10 bytes"):
        payload.value_json("result", "x" * 20, 10)
    with pytest.raises(PayloadError, match="NUL"):
        payload.value_json("result", "a\0b", 100)
    deep: list[object] = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(PayloadError, match="nested deeper than 64"):
        payload.value_json("result", deep, 10_000)


def test_progress_is_a_fraction_or_a_small_dict() -> None:
    job = JobContext(id=1, queue="q", task="t", attempt=1, max_attempts=1, worker="w")
    job.progress(0.25)
    assert (job.control.progress, job.control.reported) == ("0.25", 1)
    job.progress({"done": 3, "of": 4})
    assert job.control.progress == '{"done":3,"of":4}'
    for bad, message in ((1.5, "between 0 and 1"), ("half", "expected a number"),
                         ({"blob": "x" * 5000}, "over the limit of 4096"),
                         (True, "expected a number")):
        with pytest.raises(PayloadError, match=message):
            job.progress(bad)  # type: ignore[arg-type]
    assert job.control.reported == 2 and not job.cancelled
