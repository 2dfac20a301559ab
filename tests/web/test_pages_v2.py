"""The job, queue and hosts pages, the scheduled state, and the bulk actions, over plain
HTTP against a real `pgfleet web`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import httpx
import psycopg

from tests.web.conftest import WebServer, dead_job, insert_job, job_state
from tests.web.test_http import csrf_of, exists


def running_job(dsn: str, **fields: str) -> int:
    fields.setdefault("lease_holder", "host-a:1:w")
    return insert_job(dsn, state="running", attempt=1, started_at="now",
                      lease_expires_at="infinity", **fields)


def test_the_job_page_shows_result_meta_progress_keys_and_run_time(
        web: Callable[..., WebServer], dsn: str) -> None:
    traceback = ('ValueError: bad card\n  File "/app/billing.py", line 12, in charge\n'
                 "    raise ValueError('bad card')")
    job_id = insert_job(
        dsn, queue="billing", task="charge", state="succeeded", attempt=2,
        started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:00:03.5Z",
        result='{"charged": 1999, "receipt": "r-1"}', meta='{"tenant": "acme"}',
        progress="0.75", concurrency_key="customer-42",
        errors=json.dumps([{"attempt": 1, "at": "2026-01-01T00:00:00Z", "error": traceback}]))
    server = web()
    with httpx.Client(base_url=server.url) as client:
        page = client.get(f"/jobs/{job_id}").text
        assert ('id="job-result">{\n  &#34;charged&#34;: 1999,\n  &#34;receipt&#34;: '
                '&#34;r-1&#34;\n}<') in page
        assert "&#34;tenant&#34;: &#34;acme&#34;" in page and 'id="job-progress">0.75<' in page
        assert 'id="job-concurrency-key">customer-42<' in page
        assert 'id="job-run-time">3.5s<' in page
        # A traceback keeps its line breaks as line breaks, not as hidden-character boxes.
        errors = page[page.index('id="job-errors"'):]
        assert 'ValueError: bad card\n  File &#34;/app/billing.py&#34;' in errors
        assert 'class="ctl"' not in errors
        # Succeeded: nothing to retry or cancel, but it can be deleted.
        assert 'data-action="retry-job"' not in page and 'data-action="cancel-job"' not in page
        assert 'data-action="delete-job"' in page
        download = client.get(f"/jobs/{job_id}/result")
        assert download.status_code == 200
        assert download.headers["content-type"] == "application/json"
        assert "attachment" in download.headers["content-disposition"]
        assert download.json() == {"charged": 1999, "receipt": "r-1"}
        assert client.get(f"/jobs/{job_id + 1000}/result").status_code == 404


def test_a_big_result_is_clipped_in_the_page_and_whole_in_its_download(
        web: Callable[..., WebServer], dsn: str) -> None:
    big = {"rows": ["x" * 100] * 2000}  # about 200 kB of JSON
    job_id = insert_job(dsn, state="succeeded", finished_at="now", result=json.dumps(big))
    server = web()
    with httpx.Client(base_url=server.url) as client:
        page = client.get(f"/jobs/{job_id}").text
        assert "more characters)" in page and len(page) < 120_000
        assert "Download the whole result" in page
        assert client.get(f"/jobs/{job_id}/result").json() == big


def test_cancel_a_running_job_from_its_page_and_delete_a_dead_one(
        web: Callable[..., WebServer], dsn: str) -> None:
    running = running_job(dsn)
    dead = dead_job(dsn)
    server = web()
    with httpx.Client(base_url=server.url) as client:
        token = csrf_of(client)
        page = client.get(f"/jobs/{running}").text
        assert 'data-action="cancel-job"' in page and 'data-action="delete-job"' not in page

        def act(name: str, job_id: int) -> httpx.Response:
            return client.post(f"/actions/{name}", data={"job_id": str(job_id), "csrf": token,
                                                         "confirmed": "yes"})

        assert act("cancel-job", running).status_code == 303
        # As `pgfleet jobs cancel`: its worker is asked to stop it; it runs until then.
        assert job_state(dsn, running) == "running"
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT cancel_requested_at FROM pgfleet.jobs WHERE id = %s",
                               (running,)).fetchone()
        assert row is not None and row[0] is not None
        page = client.get(f"/jobs/{running}").text
        assert 'id="cancelling"' in page and 'data-action="cancel-job"' not in page
        refused = act("delete-job", running)
        assert refused.status_code == 409 and "cancel it first" in refused.text
        assert exists(dsn, running)
        asked = client.post("/actions/delete-job", data={"job_id": str(dead), "csrf": token})
        assert asked.status_code == 200 and "cannot be undone" in asked.text
        assert exists(dsn, dead)
        assert act("delete-job", dead).status_code == 303
        assert not exists(dsn, dead)


def test_scheduled_is_a_state_of_its_own_in_the_list_and_the_overview(
        web: Callable[..., WebServer], dsn: str) -> None:
    due = insert_job(dsn, queue="mail", run_at="now")
    later = insert_job(dsn, queue="mail", run_at="2999-01-01T00:00:00Z")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        listed = client.get("/jobs").text
        assert re.search(rf'data-job="{later}">.*?<span class="state scheduled">scheduled',
                         listed, re.S)
        assert re.search(rf'data-job="{due}">.*?<span class="state queued">queued',
                         listed, re.S)
        scheduled = client.get("/jobs?state=scheduled").text
        assert f'data-job="{later}"' in scheduled and f'data-job="{due}"' not in scheduled
        queued = client.get("/jobs?state=queued").text
        assert f'data-job="{due}"' in queued and f'data-job="{later}"' not in queued
        row = re.search(r'<tr data-queue="mail">(.*?)</tr>', client.get("/").text, re.S)
        assert row is not None
        cells = re.findall(r'<td class="num">(.*?)</td>', row.group(1), re.S)
        assert re.sub("<[^>]+>", "", cells[0]) == "1"  # waiting
        assert re.sub("<[^>]+>", "", cells[1]) == "1"  # scheduled


def test_the_list_shows_the_first_line_of_a_traceback(
        web: Callable[..., WebServer], dsn: str) -> None:
    job_id = dead_job(dsn, last_error='KeyError: \'sku\'\n  File "/app/x.py", line 3, in f')
    server = web()
    with httpx.Client(base_url=server.url) as client:
        row = re.search(rf'<tr data-job="{job_id}">(.*?)</tr>', client.get("/jobs").text,
                        re.S)
    assert row is not None
    assert "KeyError: &#39;sku&#39;</td>" in row.group(1) and "x.py" not in row.group(1)


def test_bulk_retry_cancel_and_delete_of_ticked_jobs(
        web: Callable[..., WebServer], dsn: str) -> None:
    dead = [dead_job(dsn, queue="bulk") for _ in range(3)]
    waiting = insert_job(dsn, queue="bulk")
    running = running_job(dsn, queue="bulk")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        token = csrf_of(client, "/jobs")
        # One `ids` field per ticked row, as the browser sends them.
        ticked = "&".join(f"ids={i}" for i in [*dead[:2], waiting]) + f"&csrf={token}"
        asked = client.post("/actions/bulk-retry", content=ticked, headers={
            "content-type": "application/x-www-form-urlencoded"})
        assert asked.status_code == 200 and "Retry 3 jobs selected?" in asked.text
        assert [job_state(dsn, i) for i in dead] == ["dead"] * 3
        # The confirmation carries the ids it asked about.
        confirm = re.search(r'name="ids" value="([0-9,]+)"', asked.text)
        assert confirm is not None
        done = client.post("/actions/bulk-retry", data={
            "ids": confirm.group(1), "csrf": token, "confirmed": "yes"})
        assert done.status_code == 200
        assert "Retried 2 of 3 jobs. The other one was not dead or cancelled" in done.text
        assert [job_state(dsn, i) for i in dead] == ["queued", "queued", "dead"]
        assert job_state(dsn, waiting) == "queued"

        done = client.post("/actions/bulk-cancel", data={
            "ids": f"{waiting},{running},{dead[2]}", "csrf": token, "confirmed": "yes"})
        assert "Cancelled or asked to stop 2 of 3 jobs" in done.text
        assert job_state(dsn, waiting) == "cancelled" and job_state(dsn, running) == "running"

        done = client.post("/actions/bulk-delete", data={
            "ids": f"{waiting},{running},{dead[2]}", "csrf": token, "confirmed": "yes"})
        assert "Deleted 2 of 3 jobs" in done.text
        assert not exists(dsn, waiting) and not exists(dsn, dead[2]) and exists(dsn, running)

        none = client.post("/actions/bulk-retry", data={"csrf": token, "confirmed": "yes"})
        assert none.status_code == 400 and "no job selected" in none.text
        many = client.post("/actions/bulk-retry", data={
            "ids": ",".join(str(i) for i in range(1, 600)), "csrf": token})
        assert many.status_code == 400 and "at most 500 jobs" in many.text
        forged = client.post("/actions/bulk-delete", data={"ids": str(running),
                                                           "confirmed": "yes"})
        assert forged.status_code == 403


def test_bulk_retry_of_every_job_matching_the_filter(
        web: Callable[..., WebServer], dsn: str) -> None:
    mine = [dead_job(dsn, queue="billing", task="charge") for _ in range(5)]
    other_task = dead_job(dsn, queue="billing", task="refund")
    other_queue = dead_job(dsn, queue="mail", task="charge")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        token = csrf_of(client, "/jobs")
        form = {"matching": "yes", "state": "dead", "queue": "billing", "task": "charge",
                "csrf": token}
        asked = client.post("/actions/bulk-retry", data=form)
        assert "Retry 5 jobs matching state = dead, queue = billing, task = charge?" in asked.text
        done = client.post("/actions/bulk-retry", data={**form, "confirmed": "yes"})
        assert "Retried 5 of 5 jobs." in done.text
        assert 'href="/jobs?state=dead&amp;queue=billing&amp;task=charge"' in done.text
    assert [job_state(dsn, i) for i in mine] == ["queued"] * 5
    assert job_state(dsn, other_task) == "dead" and job_state(dsn, other_queue) == "dead"


def test_read_only_refuses_bulk_actions(web: Callable[..., WebServer], dsn: str) -> None:
    job_id = dead_job(dsn)
    server = web("--read-only")
    with httpx.Client(base_url=server.url) as client:
        page = client.get("/jobs").text
        assert 'name="ids"' not in page and 'data-action="bulk-retry"' not in page
        refused = client.post("/actions/bulk-retry", data={"ids": str(job_id),
                                                           "confirmed": "yes"})
        assert refused.status_code == 403
    assert job_state(dsn, job_id) == "dead"


def test_the_queue_page_counts_limits_running_jobs_and_charts(
        web: Callable[..., WebServer], dsn: str) -> None:
    for _ in range(2):
        insert_job(dsn, queue="img", run_at="now")
    insert_job(dsn, queue="img", run_at="2999-01-01T00:00:00Z")
    running = running_job(dsn, queue="img", task="resize", progress='{"done": 3}')
    dead_job(dsn, queue="img")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Four succeeded a few minutes ago, each waited 2 s and ran 10 s.
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, attempt, run_at, started_at,"
            " finished_at) SELECT 'img', 'resize', 'succeeded', 1,"
            " now() - interval '3 min' - interval '12 s', now() - interval '3 min' - "
            " interval '10 s', now() - interval '3 min' FROM generate_series(1, 4)")
        conn.execute("INSERT INTO pgfleet.queues (name, paused) VALUES ('img', true)")
        conn.execute("INSERT INTO pgfleet.queue_limits (queue, global_concurrency)"
                     " VALUES ('img', 8)")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        page = client.get("/queues/img").text
        assert 'id="queue-paused"' in page and 'data-action="resume-queue"' in page

        def count(name: str) -> str:
            found = re.search(rf'id="count-{name}">([^<]*)<', page)
            assert found is not None, name
            return found.group(1)

        assert [count(n) for n in ("waiting", "scheduled", "running", "dead")] == \
            ["2", "1", "1", "1"]
        assert "1 of 8 running" in page
        assert re.search(rf'<tr data-job="{running}">.*?resize.*?{{&#34;done&#34;: 3}}',
                         page, re.S)
        svgs = re.findall(r'<svg class="chart" id="(queue-[a-z]+)"', page)
        assert svgs == ["queue-throughput", "queue-wait", "queue-run"]
        # The bars of three minutes ago: four succeeded, plus the dead job of now.
        assert re.search(r"<title>[34] min ago: 4 succeeded, 0 died</title>", page)
        assert re.search(r"<title>[01] min ago: 0 succeeded, 1 died</title>", page)
        assert re.search(r"<title>[34] min ago: p50 2.0s</title>", page)  # wait
        assert re.search(r"<title>[34] min ago: p95 10.0s</title>", page)  # run
        assert "style=" not in page and "<script>" not in page
        overview = client.get("/").text
        assert 'id="fleet-throughput"' in overview
        assert re.search(r"<title>[34] min ago: 4 succeeded, 0 died</title>", overview)
        missing = client.get("/queues/nosuch")
        assert missing.status_code == 404 and "nosuch" in missing.text


def test_the_hosts_page_shows_every_process_and_the_jobs_each_worker_holds(
        web: Callable[..., WebServer], dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgfleet.processes (id, host, pid, kind, queue, supervisor) VALUES"
            " ('h1:10:sup', 'h1', 10, 'supervisor', NULL, NULL),"
            " ('h1:11:w', 'h1', 11, 'worker', 'img', 'h1:10:sup'),"
            " ('h1:12:m', 'h1', 12, 'maintenance', NULL, 'h1:10:sup'),"
            " ('h2:20:w', 'h2', 20, 'worker', 'mail', NULL)")
    held = running_job(dsn, queue="img", task="resize", lease_holder="h1:11:w")
    other = running_job(dsn, queue="mail", task="send", lease_holder="h2:20:w")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        page = client.get("/hosts").text
        overview = client.get("/").text
    rows = dict(re.findall(r'<tr[^>]*data-process="([^"]+)">(.*?)</tr>', page, re.S))
    assert set(rows) == {"h1:10:sup", "h1:11:w", "h1:12:m", "h2:20:w"}
    assert f'href="/jobs/{held}"' in rows["h1:11:w"] and "resize" in rows["h1:11:w"]
    assert f'href="/jobs/{other}"' in rows["h2:20:w"] and "no supervisor" in rows["h2:20:w"]
    assert "maintenance" in rows["h1:12:m"]
    assert "2 hosts, 4 registered processes" in overview
