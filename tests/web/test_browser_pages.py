"""The job page, a bulk selection with a confirmed bulk retry, and the queue page with its
charts, in Debian's Chromium driven by Playwright."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg

from tests.web.conftest import WebServer, dead_job, insert_job, job_state, screenshot
from tests.web.test_browser import wait_refreshed

TRACEBACK = ('CardDeclined: insufficient funds\n  File "/app/billing.py", line 12, in charge\n'
             "    gateway.charge(customer, cents)\n"
             '  File "/app/gateway.py", line 40, in charge\n    raise CardDeclined(reply)')


def test_the_job_page_shows_what_a_job_did_and_cancels_it_while_it_runs(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    done = insert_job(dsn, queue="billing", task="charge", state="succeeded", attempt=2,
                      started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:00:01.2Z",
                      result='{"receipt": "r-77", "cents": 1999}',
                      meta='{"tenant": "acme", "trace_id": "abc123"}',
                      concurrency_key="customer-42", args='{"customer": 42}',
                      errors=json.dumps([{"attempt": 1, "at": "2026-01-01T00:00:00Z",
                                          "error": TRACEBACK}]))
    running = insert_job(dsn, queue="billing", task="charge", state="running", attempt=1,
                         started_at="now", lease_holder="web-1:101:w",
                         lease_expires_at="infinity", progress='{"step": 2, "of": 5}')
    server = web()
    page.goto(f"{server.url}jobs/{done}")
    assert page.inner_text("#job-state") == "succeeded"
    assert '"receipt": "r-77"' in page.inner_text("#job-result")
    assert '"trace_id": "abc123"' in page.inner_text("#job-meta")
    assert page.inner_text("#job-concurrency-key") == "customer-42"
    assert page.inner_text("#job-run-time") == "1.2s"
    # The traceback is drawn as lines, the task's frame first, with nothing boxed.
    lines = page.inner_text("#job-errors pre").splitlines()
    assert lines[0] == "CardDeclined: insufficient funds"
    assert lines[1].strip().startswith('File "/app/billing.py"')
    assert page.locator("#job-errors span.ctl").count() == 0
    assert page.get_attribute("#job-result-download", "href") == f"/jobs/{done}/result"
    screenshot(page, "job-result")

    page.goto(f"{server.url}jobs/{running}")
    assert page.inner_text("#job-state") == "running"
    assert '"step": 2' in page.inner_text("#job-progress")
    assert page.locator('button[data-action="delete-job"]').count() == 0
    page.click('button[data-action="cancel-job"]')
    assert "stopped by its worker" in page.inner_text("#question")
    page.click("#confirm")
    page.wait_for_url(f"**/jobs/{running}")
    assert page.inner_text("#cancelling") == "cancelling"
    assert page.locator('button[data-action="cancel-job"]').count() == 0
    assert job_state(dsn, running) == "running"  # until its worker stops it


def test_select_jobs_keep_the_selection_through_a_refresh_and_retry_them(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    dead = [dead_job(dsn, queue="billing", task="charge") for _ in range(60)]
    server = web()
    page.goto(f"{server.url}jobs?state=dead&queue=billing")
    picks = page.locator("input.pick")
    assert picks.count() == 50
    picks.nth(0).check()
    picks.nth(3).check()
    wait_refreshed(page)
    wait_refreshed(page)
    checked = [b.get_attribute("value") for b in page.locator("input.pick:checked").all()]
    assert checked == [str(dead[-1]), str(dead[-4])]

    page.check("#select-page")
    assert page.locator("input.pick:checked").count() == 50
    screenshot(page, "jobs-bulk")
    page.click('button[data-action="bulk-retry"]')
    assert page.inner_text("#question").startswith("Retry 50 jobs selected?")
    assert [job_state(dsn, i) for i in dead].count("dead") == 60  # asked, not done
    page.click("#confirm")
    assert page.inner_text("#message") == "Retried 50 of 50 jobs."
    states = [job_state(dsn, i) for i in dead]
    assert states[10:] == ["queued"] * 50 and states[:10] == ["dead"] * 10

    # The 10 left: every job matching the filter, in one action.
    page.click("#back")
    page.wait_for_url("**/jobs?state=dead&queue=billing")
    assert page.locator("input.pick").count() == 10
    page.check("#select-matching")
    page.click('button[data-action="bulk-retry"]')
    assert page.inner_text("#question").startswith(
        "Retry 10 jobs matching state = dead, queue = billing?")
    page.click("#cancel-confirm")
    page.wait_for_url("**/jobs?state=dead&queue=billing")
    assert [job_state(dsn, i) for i in dead[:10]] == ["dead"] * 10
    page.check("#select-matching")
    page.click('button[data-action="bulk-retry"]')
    page.click("#confirm")
    assert page.inner_text("#message") == "Retried 10 of 10 jobs."
    assert all(job_state(dsn, i) == "queued" for i in dead)


def test_the_queue_page_draws_the_last_hour(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Each of the last 30 minutes: i jobs succeeded and one died, waiting i seconds.
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, attempt, run_at, started_at,"
            " finished_at)"
            " SELECT 'img', 'resize', CASE WHEN n = 0 THEN 'dead' ELSE 'succeeded' END"
            "::pgfleet.job_state, 1,"
            " now() - make_interval(mins => i) - make_interval(secs => i + 2),"
            " now() - make_interval(mins => i) - interval '2 s', now() - make_interval(mins => i)"
            " FROM generate_series(1, 30) i, generate_series(0, i) n")
    insert_job(dsn, queue="img", task="resize")
    server = web()
    page.goto(server.url)
    page.click('tr[data-queue="img"] a')
    page.wait_for_url("**/queues/img")
    assert page.inner_text("#count-waiting") == "1"
    bars = page.locator("#queue-throughput rect.bar")
    assert bars.count() == 60  # 30 minutes, a green and a red bar each
    box = page.locator("#queue-throughput").bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 100
    # The tallest green bar is the oldest minute (30 succeeded), drawn taller than the 1.
    heights = [float(b.get_attribute("height")) for b in
               page.locator("#queue-throughput rect.bar.ok").all()]
    assert heights[0] > heights[-1] > 0
    assert page.locator("#queue-wait polyline").count() == 2
    assert page.locator("#queue-run circle").count() == 60
    colour = page.eval_on_selector("#queue-throughput rect.bar.ok",
                                   "e => getComputedStyle(e).fill")
    assert colour == "rgb(34, 197, 94)"  # the stylesheet reaches the SVG under the CSP
    screenshot(page, "queue-charts")
