"""200 concurrent scrapes of /metrics while jobs run: every scrape answers, no label
carries job data, supervision goes on (no child is declared stale) and the books balance."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import enqueue, mixed_batch, wait_settled
from tests.support.cluster import free_port
from tests.support.fleet import Fleet
from tests.support.workers import wait_for

pytestmark = pytest.mark.faults


def test_200_concurrent_scrapes_while_jobs_run(db: Db, cfleet: Callable[..., Fleet]) -> None:
    dsn = db.dsn
    port = free_port()
    f = cfleet({"default": {"processes": 2, "threads": 4}},
               metrics={"enabled": True, "listen": f"127.0.0.1:{port}"})
    workers = f.wait_workers(2)
    url = f"http://127.0.0.1:{port}/metrics"
    wait_for(lambda: _get(url)[0] == 200, timeout=30)
    ids = enqueue(dsn, mixed_batch(3000, n_sleep=100, n_fail_once=50, sleep=0.05))

    with ThreadPoolExecutor(max_workers=200) as pool:
        answers = list(pool.map(lambda _: _get(url), range(200)))
    wait_settled(dsn, log=f.log)

    failed = [text for status, text in answers if status != 200]
    assert not failed, f"{len(failed)} of 200 scrapes failed, e.g. {failed[:3]}"
    body = _get(url)[1]
    assert 'pgfleet_jobs_finished_total{outcome="succeeded",queue="default",task="noop"}' \
        in body
    assert "job_id" not in body and dsn not in body
    assert f.workers().keys() == workers.keys()
    assert "has not beaten" not in f.log()
    books.check(dsn, ids)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except OSError as exc:
        return 0, str(exc)
