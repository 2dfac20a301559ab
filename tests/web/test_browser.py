"""The web UI in a real headless Chromium (Debian's), driven by Playwright."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.web.conftest import WebServer, dead_job, insert_job, job_state, screenshot


def enqueue(dsn: str, task: str, queue: str = "default") -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pgfleet.enqueue(%s, '{}'::jsonb, %s)", (task, queue)).fetchone()
    assert row is not None
    return int(row[0])


def wait_refreshed(page: Any) -> None:
    """Wait for one more live refresh than has happened so far. (Selectors, not
    wait_for_function: the page's CSP forbids the eval that one needs.)"""
    before = page.get_attribute("#live", "data-refreshed")
    if before is None:
        page.wait_for_selector("#live[data-refreshed]", state="attached")
    else:
        page.wait_for_selector(f'#live:not([data-refreshed="{before}"])', state="attached")


def test_find_a_dead_job_read_its_error_and_retry_it(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    for _ in range(3):
        insert_job(dsn, queue="billing", task="charge", state="succeeded", finished_at="now")
    job_id = dead_job(dsn, queue="billing", task="charge",
                      args='{"customer": 42, "amount": {"cents": 1999}}',
                      errors='[{"attempt": 1, "at": "2026-01-01T00:00:00Z", '
                             '"error": "CardDeclined: insufficient funds"}]')
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgfleet.processes (id, host, pid, kind, queue, supervisor) VALUES"
            " ('web-1:100:sup', 'web-1', 100, 'supervisor', NULL, NULL),"
            " ('web-1:101:w', 'web-1', 101, 'worker', 'billing', 'web-1:100:sup')")
        conn.execute("INSERT INTO pgfleet.schedule_runs (schedule, fire_time, job_id)"
                     " VALUES ('nightly-invoices', now() - interval '1 hour', %s)", (job_id,))
    server = web()
    page.goto(server.url)
    billing = page.locator('tr[data-queue="billing"]')
    assert billing.locator("td").nth(4).inner_text() == "1"  # dead
    assert "1 host, 2 registered processes" in page.inner_text("#hosts-summary")
    screenshot(page, "overview")
    page.click("#hosts-summary a")
    page.wait_for_url("**/hosts")
    hosts = page.inner_text("#hosts")
    assert "web-1" in hosts and "supervisor" in hosts and "worker" in hosts
    page.goto(server.url)

    page.click("text=Jobs")
    page.select_option("#filter select[name=state]", "dead")
    page.fill("#filter input[name=queue]", "billing")
    page.click("#filter button[type=submit]")
    page.wait_for_url("**/jobs?state=dead&queue=billing**")
    assert page.locator("tr[data-job]").count() == 1
    screenshot(page, "jobs")

    page.click(f'tr[data-job="{job_id}"] a')
    page.wait_for_url(f"**/jobs/{job_id}")
    assert page.inner_text("#job-state") == "dead"
    assert '"customer": 42' in page.inner_text("#job-args")
    assert "CardDeclined: insufficient funds" in page.inner_text("#job-errors")
    screenshot(page, "job")

    page.click('button[data-action="retry-job"]')
    assert page.inner_text("#question").startswith(f"Retry job {job_id}")
    screenshot(page, "confirm")
    assert job_state(dsn, job_id) == "dead"  # nothing happens before the confirmation
    page.click("#confirm")
    page.wait_for_url(f"**/jobs/{job_id}")
    assert page.inner_text("#job-state") == "queued"
    assert job_state(dsn, job_id) == "queued"

    page.click("text=Schedules")
    assert "nightly-invoices" in page.inner_text("#schedules")
    screenshot(page, "schedules")


def test_pause_and_resume_a_queue_from_the_overview(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    enqueue(dsn, "noop", queue="mail")
    server = web()
    page.goto(server.url)
    row = page.locator('tr[data-queue="mail"]')
    row.locator('button[data-action="pause-queue"]').click()
    assert "Pause queue mail" in page.inner_text("#question")
    page.click("#confirm")
    page.wait_for_url(server.url)
    assert row.locator(".queue-state").inner_text() == "paused"
    row.locator('button[data-action="resume-queue"]').click()
    page.click("#confirm")
    page.wait_for_url(server.url)
    assert row.locator(".queue-state").inner_text() == "active"


def test_live_refresh_shows_a_new_job_without_reloading(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    first = enqueue(dsn, "first")
    server = web()
    page.goto(f"{server.url}jobs")
    page.wait_for_selector(f'tr[data-job="{first}"]')
    page.evaluate("window.__sameDocument = true")
    page.fill("#filter input[name=task]", "typed, not submitted")
    added = enqueue(dsn, "arrived_later")
    page.wait_for_selector(f'tr[data-job="{added}"]')
    # The same document (no reload), and the filter being typed was left alone.
    assert page.evaluate("window.__sameDocument") is True
    assert page.input_value("#filter input[name=task]") == "typed, not submitted"
    assert page.inner_text("#live-status").startswith("live · ")

    # The job page follows its job's state too.
    page.goto(f"{server.url}jobs/{added}")
    assert page.inner_text("#job-state") == "queued"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'dead', finished_at = now() WHERE id = %s",
                     (added,))
    page.wait_for_selector("#job-state.dead")


def test_a_post_without_the_csrf_token_is_refused(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    job_id = dead_job(dsn)
    server = web()
    page.goto(server.url)
    status = page.evaluate(
        """id => fetch('/actions/retry-job', {method: 'POST',
              headers: {'Content-Type': 'application/x-www-form-urlencoded'},
              body: 'confirmed=yes&job_id=' + id}).then(r => r.status)""", job_id)
    assert status == 403
    assert job_state(dsn, job_id) == "dead"


def test_auth_is_required_on_a_non_loopback_address(
        web: Callable[..., WebServer], dsn: str, browser: Any) -> None:
    server = web("--listen", "0.0.0.0:0", "--behind-proxy",
                 env={"PGFLEET_WEB_TOKEN": "tok-123-long-enough"})
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    anonymous = browser.new_context()
    try:
        # Headless Chromium has no login prompt: a 401 asking for basic auth fails the load.
        with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
            anonymous.new_page().goto(url)
        assert anonymous.request.get(url).status == 401
    finally:
        anonymous.close()
    signed_in = browser.new_context(
        http_credentials={"username": "ops", "password": "tok-123-long-enough"})
    try:
        tab = signed_in.new_page()
        assert tab.goto(url).status == 200
        wait_refreshed(tab)  # the live refresh's fetch carries the credentials too
        assert tab.inner_text("#live-status").startswith("live · ")
    finally:
        signed_in.close()


def test_read_only_hides_and_refuses_actions(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    job_id = dead_job(dsn, queue="billing")
    server = web("--read-only")
    for path in ("", "jobs", f"jobs/{job_id}"):
        page.goto(server.url + path)
        assert page.locator("button[data-action]").count() == 0, path
        assert page.is_visible("#read-only")
    status = page.evaluate(
        """id => fetch('/actions/retry-job', {method: 'POST',
              headers: {'Content-Type': 'application/x-www-form-urlencoded'},
              body: 'confirmed=yes&job_id=' + id}).then(r => r.status)""", job_id)
    assert status == 403
    assert job_state(dsn, job_id) == "dead"


HOSTILE = "<img src=x onerror=\"window.__pwned='img'\"><script>window.__pwned='script'</script>"


def test_a_hostile_row_renders_inert(web: Callable[..., WebServer], dsn: str,
                                     page: Any) -> None:
    job_id = dead_job(
        dsn, task=HOSTILE, queue="<b onmouseover=alert(1)>q</b>",
        args='{"html": "</pre><svg onload=\\"window.__pwned=\'svg\'\\"></svg>"}',
        errors='[{"attempt": 1, "at": "now", "error": "<script>window.__pwned=\'err\'</script>"}]')
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    server = web()
    for path in ("", "jobs", f"jobs/{job_id}"):
        page.goto(server.url + path)
        wait_refreshed(page)  # the swapped-in live part is inert too
        assert page.evaluate("window.__pwned") is None, path
    assert page.inner_text("#job-task") == HOSTILE
    assert "<svg onload=" in page.inner_text("#job-args")
    assert "<script>window.__pwned='err'</script>" in page.inner_text("#job-errors")
    assert page.locator("#live script, #live img, #live svg").count() == 0
    assert dialogs == []
    screenshot(page, "hostile")
