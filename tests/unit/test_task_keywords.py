"""Task.keywords, the executor's check of a job's args, accepts and refuses exactly what
Signature.bind does (its fast path only covers signatures of plain named parameters)."""

from __future__ import annotations

from typing import Any

import pytest

from pgfleet.tasks import InvalidArguments, Task


def plain(a: int, b: int = 2, *, c: int = 3) -> None: ...
def required_keyword(a: int, *, c: int) -> None: ...
def no_parameters() -> None: ...
def collects(a: int, **rest: Any) -> None: ...
def positional_only(a: int, /, b: int = 2) -> None: ...
def star_args(*values: int, b: int = 2) -> None: ...


FUNCTIONS = [plain, required_keyword, no_parameters, collects, positional_only, star_args]
ARGS: list[Any] = [{}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "c": 3}, {"b": 2},
                   {"a": 1, "zz": 0}, {"values": [1]}, [1, 2], None]


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except InvalidArguments as exc:
        return "refused", str(exc)


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda fn: fn.__name__)
@pytest.mark.parametrize("args", ARGS, ids=repr)
def test_keywords_accept_and_refuse_as_bind_does(fn: Any, args: Any) -> None:
    task = Task(name="t", fn=fn)
    kind, detail = outcome(lambda: task.keywords(args))
    expected_kind, expected_detail = outcome(lambda: task.bind(args))
    assert kind == expected_kind
    if kind == "refused":
        assert detail == expected_detail
    else:
        assert detail == args
        fn(**detail)  # what the executor then calls
