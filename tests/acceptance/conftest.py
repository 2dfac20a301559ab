from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet, config_text


@pytest.fixture
def fleet(dsn: str, tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """fleet(queues, **extra) → a started supervisor; every one is stopped afterwards."""
    started: list[Fleet] = []

    def start(queues: dict[str, Any], *, name: str = "fleet", args: tuple[str, ...] = (),
              **extra: Any) -> Fleet:
        f = Fleet(dsn, tmp_path, config_text(queues, **extra), name=name).start(*args)
        started.append(f)
        return f

    yield start
    for f in started:
        f.stop()
