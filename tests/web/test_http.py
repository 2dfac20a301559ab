"""The web UI over plain HTTP against a real `pgfleet web`: headers, CSRF, auth, read-only,
filters, paging, actions, escaping, and its refusals at start."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.web.conftest import (
    WebServer,
    dead_job,
    insert_job,
    job_state,
    run_web,
    write_secret,
)

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def csrf_of(client: httpx.Client, path: str = "/") -> str:
    found = CSRF.search(client.get(path).text)
    assert found, "no CSRF token in the page"
    return found.group(1)


def test_pages_carry_the_security_headers(web: Callable[..., WebServer], dsn: str) -> None:
    job_id = dead_job(dsn)
    server = web()
    with httpx.Client(base_url=server.url) as client:
        for path in ("/", "/jobs", f"/jobs/{job_id}", "/schedules"):
            response = client.get(path)
            assert response.status_code == 200, path
            csp = response.headers["content-security-policy"]
            assert "script-src 'self'" in csp
            assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
            assert response.headers["server-timing"].startswith("app;dur=")
            assert "frame-ancestors 'none'" in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["cache-control"] == "no-store"
            assert response.headers["x-content-type-options"] == "nosniff"
        static = client.get("/static/live.js")
        assert static.status_code == 200 and "no-store" not in static.headers.get(
            "cache-control", "")
        # No inline script or style anywhere, so the CSP needs no exception.
        page = client.get("/").text
        assert '<main id="live" data-refresh="2.0">' in page
        assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/live.js" defer>']
        assert "style=" not in page and "<style" not in page


def test_a_post_without_the_csrf_token_is_refused(web: Callable[..., WebServer],
                                                    dsn: str) -> None:
    job_id = dead_job(dsn)
    server = web()
    with httpx.Client(base_url=server.url) as client:
        token = csrf_of(client)
        form = {"job_id": str(job_id), "confirmed": "yes"}
        assert client.post("/actions/retry-job", data=form).status_code == 403
        assert client.post("/actions/retry-job",
                           data={**form, "csrf": "0" * 64}).status_code == 403
        # The right token without the cookie it was made for (another browser) fails too.
        with httpx.Client(base_url=server.url) as stranger:
            assert stranger.post("/actions/retry-job",
                                 data={**form, "csrf": token}).status_code == 403
        assert job_state(dsn, job_id) == "dead"
        # Unconfirmed: a confirmation page, nothing done.
        asked = client.post("/actions/retry-job", data={"job_id": str(job_id), "csrf": token})
        assert asked.status_code == 200 and f"Retry job {job_id}" in asked.text
        assert job_state(dsn, job_id) == "dead"
        done = client.post("/actions/retry-job", data={**form, "csrf": token})
        assert done.status_code == 303 and done.headers["location"] == f"/jobs/{job_id}"
        assert job_state(dsn, job_id) == "queued"
        # Not retryable any more: said so, nothing changed.
        again = client.post("/actions/retry-job", data={**form, "csrf": token})
        assert again.status_code == 409 and "is not dead or cancelled" in again.text


def test_actions_use_the_operator_semantics(web: Callable[..., WebServer], dsn: str) -> None:
    waiting = insert_job(dsn, queue="mail")
    dead = [dead_job(dsn, queue="mail") for _ in range(3)]
    other_dead = dead_job(dsn, queue="other")
    old_done = insert_job(dsn, state="succeeded", finished_at="2020-01-01T00:00:00Z")
    new_done = insert_job(dsn, state="succeeded", finished_at="now")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        token = csrf_of(client)

        def act(name: str, **fields: str) -> httpx.Response:
            return client.post(f"/actions/{name}",
                               data={**fields, "csrf": token, "confirmed": "yes"})

        assert act("cancel-job", job_id=str(waiting)).status_code == 303
        assert job_state(dsn, waiting) == "cancelled"
        refused = act("cancel-job", job_id=str(dead[0]))
        assert refused.status_code == 409 and "only queued and running jobs cancel" in refused.text
        assert act("retry-queue", queue="mail").status_code == 303
        assert [job_state(dsn, i) for i in dead] == ["queued"] * 3
        assert job_state(dsn, other_dead) == "dead"
        assert act("pause-queue", queue="mail").status_code == 303
        assert 'data-queue="mail"' in client.get("/").text
        assert paused(dsn, "mail") is True
        assert act("resume-queue", queue="mail").status_code == 303
        assert paused(dsn, "mail") is False
        assert act("delete-finished", older_than_hours="24").status_code == 303
        assert exists(dsn, new_done) and not exists(dsn, old_done)
        assert act("delete-finished", older_than_hours="0").status_code == 303
        # Every finished job goes (the cancelled one too); the requeued ones stay.
        assert not exists(dsn, new_done) and not exists(dsn, waiting) and exists(dsn, dead[0])
        bad = act("delete-finished", older_than_hours="-1")
        assert bad.status_code == 400 and "whole number of hours" in bad.text
        assert act("no-such-action").status_code == 400


def paused(dsn: str, queue: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT paused FROM pgfleet.queues WHERE name = %s",
                           (queue,)).fetchone()
    return bool(row and row[0])


def exists(dsn: str, job_id: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pgfleet.jobs WHERE id = %s",
                            (job_id,)).fetchone() is not None


def test_read_only_shows_no_actions_and_refuses_them(web: Callable[..., WebServer],
                                                     dsn: str) -> None:
    job_id = dead_job(dsn)
    server = web("--read-only")
    assert "(read-only)" in server.output[0]
    with httpx.Client(base_url=server.url) as client:
        for path in ("/", "/jobs", f"/jobs/{job_id}"):
            page = client.get(path).text
            assert 'method="post"' not in page, path
            assert 'id="read-only"' in page
        # Even with a valid token (taken from a writable UI's signing would differ anyway).
        refused = client.post("/actions/retry-job",
                              data={"job_id": str(job_id), "confirmed": "yes"})
        assert refused.status_code == 403 and "read-only" in refused.text
    assert job_state(dsn, job_id) == "dead"


def test_without_auth_only_a_loopback_host_name_is_served(
        web: Callable[..., WebServer], dsn: str) -> None:
    server = web()
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"Host": "localhost"}).status_code == 200
        rebound = client.get("/", headers={"Host": "attacker.example:8080"})
        assert rebound.status_code == 421


def test_a_non_loopback_bind_needs_a_token_or_basic_auth(
        web: Callable[..., WebServer], dsn: str, tmp_path: Path) -> None:
    refused = run_web(["--listen", "0.0.0.0:0"])
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "pgfleet: error: --listen 0.0.0.0:0 is not a loopback address: set a token "
        "(PGFLEET_WEB_TOKEN or --token-file) or basic auth (PGFLEET_WEB_BASIC_AUTH or "
        "--basic-auth-file) first"]
    assert refused.stdout == ""
    named = run_web(["--listen", "ops-box.example:0"])
    assert named.returncode == 2 and "is not a loopback address" in named.stderr

    server = web("--listen", "0.0.0.0:0", "--behind-proxy",
                 env={"PGFLEET_WEB_TOKEN": "s3cret-token-abcdef"})
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    with httpx.Client(base_url=url) as client:
        denied = client.get("/")
        assert denied.status_code == 401 and "Basic" in denied.headers["www-authenticate"]
        assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer s3cret-token-abcdef"}
                          ).status_code == 200
        assert client.get("/", auth=("anyone", "s3cret-token-abcdef")).status_code == 200
        assert client.post("/actions/retry-job", data={"job_id": "1"}).status_code == 401

    secret = tmp_path / "basic"
    write_secret(secret, "admin:correct horse\n")
    server = web("--listen", "0.0.0.0:0", "--behind-proxy", "--basic-auth-file", str(secret))
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    with httpx.Client(base_url=url) as client:
        assert client.get("/", auth=("admin", "correct horse")).status_code == 200
        assert client.get("/", auth=("admin", "wrong")).status_code == 401
        assert client.get("/", auth=("root", "correct horse")).status_code == 401

    token = tmp_path / "token"
    write_secret(token, "from-a-file-0123456\n")
    server = web("--listen", "0.0.0.0:0", "--behind-proxy", "--token-file", str(token),
                 env={"PGFLEET_WEB_BASIC_AUTH": "ops:env-password"})
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    with httpx.Client(base_url=url) as client:
        assert client.get("/", headers={"Authorization": "Bearer from-a-file-0123456"}
                          ).status_code == 200
        assert client.get("/", auth=("ops", "env-password")).status_code == 200
        assert client.get("/").status_code == 401


def test_the_default_address_is_loopback_port_8080() -> None:
    result = run_web(["--help"])
    assert result.returncode == 0
    assert "127.0.0.1:8080" in result.stdout


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--listen", "nonsense"], {}, "--listen 'nonsense': expected HOST:PORT"),
    (["--token-file", "/nonexistent/token"], {}, "--token-file /nonexistent/token: "),
    ([], {"PGFLEET_WEB_BASIC_AUTH": "just-a-user"},
     "PGFLEET_WEB_BASIC_AUTH: expected 'user:password'"),
])
def test_bad_settings_are_one_line(dsn: str, args: list[str], env: dict[str, str],
                                   message: str) -> None:
    result = run_web(args, env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_an_empty_token_file_is_refused(dsn: str, tmp_path: Path) -> None:
    empty = tmp_path / "token"
    write_secret(empty, "\n")
    result = run_web(["--token-file", str(empty)])
    assert result.returncode == 2
    assert result.stderr.strip() == f"pgfleet: error: --token-file {empty}: the file is empty"


def test_a_blank_token_in_the_environment_is_refused(dsn: str) -> None:
    # Found by an outside trial: "  " was taken as a real token on 0.0.0.0.
    result = run_web(["--listen", "0.0.0.0:0"], env={"PGFLEET_WEB_TOKEN": "  "})
    assert result.returncode == 2
    assert result.stderr.strip() == "pgfleet: error: PGFLEET_WEB_TOKEN holds only white space"


def test_a_database_without_the_schema_is_refused(empty_dsn: str) -> None:
    result = run_web(["--database-url", empty_dsn])
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "pgfleet: error: the pgfleet schema is not installed: run `pgfleet migrate`")


def test_an_unreachable_database_is_one_line_without_the_password() -> None:
    url = "postgresql://someone:hunter2@127.0.0.1:1/nowhere"
    result = run_web(["--database-url", url])
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgfleet: error: cannot connect")
    assert "hunter2" not in result.stderr


def test_filters_and_keyset_pages(web: Callable[..., WebServer], dsn: str) -> None:
    ids = [insert_job(dsn, queue="q1" if i % 2 else "q2", task=f"task_{i % 3}",
                      args=f'{{"customer": {i}, "note": "50%_off"}}') for i in range(130)]
    failed = dead_job(dsn, queue="q1", task="charge", args='{"customer": 4242}')
    server = web()
    with httpx.Client(base_url=server.url) as client:
        def listed(query: str) -> list[int]:
            return [int(i) for i in re.findall(r'data-job="(\d+)"', client.get(
                f"/jobs?{query}").text)]

        first = listed("")
        assert first == [failed, *reversed(ids)][:50]
        page = client.get("/jobs").text
        older = re.search(r'href="(/jobs\?before=\d+)" id="older"', page)
        assert older
        second = [int(i) for i in re.findall(r'data-job="(\d+)"', client.get(
            older.group(1).replace("&amp;", "&")).text)]
        assert second == list(reversed(ids))[49:99]
        assert listed("state=dead") == [failed]
        assert listed("state=dead&queue=q2") == []
        assert listed("queue=q1&task=task_0") == [i for i in reversed(ids)
                                                  if ids.index(i) % 2 and ids.index(i) % 3 == 0]
        assert listed(f"id={ids[7]}") == [ids[7]]
        assert listed("q=boom") == [failed]  # the error text
        assert listed("q=%22customer%22%3A+4242") == [failed]  # args: "customer": 4242
        # % and _ are literal in the search, not wildcards.
        assert listed("q=50%25_off") == list(reversed(ids))[:50]
        assert listed("q=50%25%25off") == []
        bad = client.get("/jobs?state=exploded&id=x")
        assert bad.status_code == 400
        assert "state must be one of" in bad.text and "id must be a positive" in bad.text
        assert client.get("/jobs/999999999").status_code == 404


def test_hostile_rows_are_escaped(web: Callable[..., WebServer], dsn: str) -> None:
    hostile = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"
    job_id = dead_job(dsn, task=hostile, queue=hostile[:100],
                      args='{"x": "</pre><script>alert(2)</script>"}',
                      errors='[{"attempt": "<b>1</b>", "at": "<i>", '
                             '"error": "<script>e</script>"}]')
    odd = insert_job(dsn, legacy=True, args='"a string, not an object"',
                     errors='{"not": "<a list>"}')
    server = web()
    with httpx.Client(base_url=server.url) as client:
        for path in ("/", "/jobs", f"/jobs/{job_id}", f"/jobs/{odd}"):
            page = client.get(path)
            assert page.status_code == 200, path
            assert "<script>" not in page.text and "<img src=x" not in page.text, path
            assert "<b>1</b>" not in page.text and "<i>" not in page.text
        assert "&lt;script&gt;document.title=" in client.get(f"/jobs/{job_id}").text
        assert "&lt;a list&gt;" in client.get(f"/jobs/{odd}").text


def test_schedules_show_what_the_database_recorded(web: Callable[..., WebServer],
                                                   dsn: str) -> None:
    done = insert_job(dsn, state="succeeded", finished_at="now")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgfleet.schedule_runs (schedule, fire_time, job_id) VALUES"
            " ('nightly', '2026-01-01 00:00Z', NULL), ('nightly', '2026-01-02 00:00Z', %s),"
            " ('<hourly>', '2026-01-02 05:00Z', 999999)", (done,))
    server = web()
    with httpx.Client(base_url=server.url) as client:
        page = client.get("/schedules").text
    assert 'data-schedule="nightly"' in page and 'data-schedule="&lt;hourly&gt;"' in page
    nightly = page.split('data-schedule="nightly"')[1].split("</tr>")[0]
    assert "2026-01-02 00:00:00 UTC" in nightly and f'href="/jobs/{done}"' in nightly
    assert "succeeded" in nightly and "2026-01-01 00:00:00 UTC" in nightly
    hourly = page.split('data-schedule="&lt;hourly&gt;"')[1].split("</tr>")[0]
    assert "pruned" in hourly


def test_a_filtered_search_walks_windows_of_ids_to_the_oldest_job(
        web: Callable[..., WebServer], dsn: str) -> None:
    """Matches spread over more ids than one window holds: following "older →" lists each
    exactly once, newest first, and the last page has no "older →"."""
    expected = [dead_job(dsn, queue="far")]
    insert_job(dsn, queue="far")  # waiting, so not listed
    expected.append(dead_job(dsn, queue="far", id=250_000))
    expected += [dead_job(dsn, queue="far", id=500_000 + i) for i in range(60)]
    dead_job(dsn, queue="near")
    server = web()
    seen: list[int] = []
    pages = 0
    url: str | None = "/jobs?q=boom&queue=far"  # a text search: windowed
    with httpx.Client(base_url=server.url) as client:
        while url is not None:
            page = client.get(url).text
            seen += [int(i) for i in re.findall(r'data-job="(\d+)"', page)]
            assert 'id="searched"' in page
            older = re.search(r'href="([^"]+)" id="older"', page)
            url = older.group(1).replace("&amp;", "&") if older else None
            pages += 1
            assert pages < 100
    assert seen == sorted(expected, reverse=True)
