"""enqueue_many's shortcut for jobs of only task, args and queue (client._plain_row) gives
the row, or the error, that the general validation gives."""

from __future__ import annotations

from typing import Any

import pytest

from pgfleet import PayloadError
from pgfleet.client import enqueue as client
from pgfleet.tasks import Task

TASK = Task(name="tasks.send", fn=lambda: None, queue="mail", max_attempts=4)

JOBS: list[dict[str, Any]] = [
    {"task": "t"},
    {"task": "t", "args": {"a": [1, {"b": "é"}]}, "queue": "q"},
    {"task": "t", "args": None, "queue": None},
    {"task": TASK},
    {"task": TASK, "queue": "other", "args": {"x": 1}},
]

BAD_JOBS: list[dict[str, Any]] = [
    {"task": ""},
    {"task": 5},
    {"task": "t", "queue": "\x07"},
    {"task": "t", "args": {"x": float("nan")}},
    {"task": "t", "args": {1: "int key"}},
    {"task": "t", "args": ["list"]},
    {"args": {}},
]


@pytest.mark.parametrize("job", JOBS)
def test_the_shortcut_makes_the_general_row(job: dict[str, Any]) -> None:
    assert client._plain_row(job) == client._job_row(job)


@pytest.mark.parametrize("job", BAD_JOBS)
def test_the_shortcut_refuses_what_the_general_path_refuses(job: dict[str, Any]) -> None:
    errors = []
    for validate in (client._plain_row, client._job_row):
        with pytest.raises((PayloadError, KeyError)) as info:
            validate(job)
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


def test_bulk_validation_names_the_job_whichever_path_it_takes() -> None:
    jobs: list[dict[str, Any]] = [{"task": "t"}] * 3 + [{"task": "t", "priority": 5000}]
    with pytest.raises(PayloadError, match=r"^jobs\[3\]\.priority"):
        client._rows(jobs)
    with pytest.raises(PayloadError, match=r"^jobs\[7\]\.args\.x"):
        client._rows([{"task": "t", "args": {"x": float("inf")}}], start=7)
    with pytest.raises(PayloadError, match=r"^jobs\[0\]: unknown field"):
        client._rows([{"task": "t", "colour": "red"}])
