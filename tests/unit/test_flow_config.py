"""The flow-control keys of a queue (docs/flow-control.md): rates, limits, and what they
rule out."""

from __future__ import annotations

import pytest

from pgfleet.config import Config
from pgfleet.core.flow import FlowLimits, Rate, parse_rate
from tests.unit.test_config import errors_of


@pytest.mark.parametrize(("text", "rate"), [
    ("100/s", Rate(100, 1.0)), ("30/m", Rate(30, 60.0)), ("1000/h", Rate(1000, 3600.0)),
    (" 5 / 10s ", Rate(5, 10.0)), ("1/500ms", Rate(1, 0.5)),
])
def test_rates(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate


def test_a_rate_prints_as_written() -> None:
    assert [str(parse_rate(t)) for t in ("100/s", "30/m", "2/h", "5/10s")] == [
        "100/s", "30/m", "2/h", "5/10s"]


@pytest.mark.parametrize("text", ["100", "100/", "/s", "0/s", "5/x", "-1/s", "5/0s", "5/2d",
                                  "10000000/s", "1e3/s",
                                  # Outside trial T7: int() reads full-width and other digits.
                                  "\uff15/s", "5/\uff11\uff10s", "\u0665/m"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        parse_rate(text)


def test_no_limits_means_no_flow_control() -> None:
    assert Config(queues={"q": {}}).queues["q"].flow_limits() is None


def test_key_concurrency_is_one_unless_configured() -> None:
    queues = Config(queues={"a": {"global_concurrency": 3, "rate_limit": "5/s"},
                            "b": {"key_concurrency": 4}}).queues
    assert queues["a"].flow_limits() == FlowLimits(3, Rate(5, 1.0), 1)
    assert queues["b"].flow_limits() == FlowLimits(None, None, 4)


def test_file_errors_name_the_key_and_line() -> None:
    text = ("queues:\n  api:\n    global_concurrency: 0\n    rate_limit: 5\n"
            "    key_concurrency: true\n")
    assert errors_of(text) == [
        "pgfleet.yaml:3: queues.api.global_concurrency: expected a value of at least 1",
        'pgfleet.yaml:4: queues.api.rate_limit: expected a rate in quotes like "100/s",'
        ' "30/m" or "1000/h"',
        "pgfleet.yaml:5: queues.api.key_concurrency: expected a number, not true/false",
    ]


def test_prefetch_is_refused_on_a_limited_queue() -> None:
    errors = errors_of("queues:\n  api:\n    prefetch: 4\n    rate_limit: 10/s\n")
    assert errors == [
        "pgfleet.yaml:3: queues.api.prefetch: prefetch must be 0 or auto on a queue with"
        " global_concurrency, rate_limit or key_concurrency: prefetched jobs would hold"
        " slots no thread runs"]
