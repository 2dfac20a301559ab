"""Fixtures of the fault-injection suite: a throwaway PostgreSQL cluster (never the shared
server on :5432, which other runs use), a fresh database per test and supervisors on it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import TASKS
from tests.support.cluster import Cluster, started_cluster
from tests.support.fleet import Fleet, config_text


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = started_cluster()
    c.make_template()
    try:
        yield c
    finally:
        c.destroy()


@dataclass
class Db:
    """A database of this test's own on the throwaway cluster."""

    cluster: Cluster
    name: str

    @property
    def dsn(self) -> str:
        return self.cluster.url(self.name)


@pytest.fixture
def db(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Db]:
    if not cluster.running():  # a scenario that stopped it and then failed
        cluster.start()
    with cluster.fresh_database() as name:
        url = cluster.url(name)
        monkeypatch.setenv("PGFLEET_AUDIT_DSN", url)
        monkeypatch.setenv("PGFLEET_DATABASE_URL", url)
        yield Db(cluster, name)
        if not cluster.running():
            cluster.start()


@pytest.fixture
def cdsn(db: Db) -> str:
    return db.dsn


def faults_config(queues: dict[str, Any], **extra: Any) -> str:
    extra.setdefault("tasks", TASKS)
    return config_text(queues, **extra)


@pytest.fixture
def cfleet(cdsn: str, tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """cfleet(queues, dsn=..., **extra) → a started supervisor on the throwaway cluster."""
    started: list[Fleet] = []

    def start(queues: dict[str, Any], *, name: str = "fleet", dsn: str | None = None,
              args: tuple[str, ...] = (), **extra: Any) -> Fleet:
        f = Fleet(dsn or cdsn, tmp_path, faults_config(queues, **extra), name=name)
        f.start(*args)
        started.append(f)
        return f

    yield start
    for f in started:
        f.stop()


@pytest.fixture(autouse=True)
def _log_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGFLEET_LOG_LEVEL", os.environ.get("PGFLEET_LOG_LEVEL", "INFO"))
