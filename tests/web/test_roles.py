"""The viewer and operator roles: a viewer token shows every page and acts on nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

from tests.support.roles import login_roles, role_dsn
from tests.web.conftest import WebServer, dead_job, job_state, run_web, write_secret
from tests.web.test_http import CSRF

OPERATOR = "operator-token-0123456789"
VIEWER = "viewer-token-0123456789"


def test_a_viewer_sees_every_page_and_acts_on_nothing(
        web: Callable[..., WebServer], dsn: str, tmp_path: Path) -> None:
    job_id = dead_job(dsn, queue="mail")
    viewer_file = tmp_path / "viewer"
    write_secret(viewer_file, VIEWER + "\n")
    server = web("--viewer-token-file", str(viewer_file),
                 env={"PGFLEET_WEB_TOKEN": OPERATOR})
    with httpx.Client(base_url=server.url, auth=("anyone", VIEWER)) as viewer:
        for path in ("/", "/jobs", f"/jobs/{job_id}", "/queues/mail", "/hosts", "/schedules"):
            page = viewer.get(path)
            assert page.status_code == 200, path
            assert 'method="post"' not in page.text and 'id="read-only"' in page.text, path
        assert viewer.get("/api/").json()["role"] == "viewer"
        # Even with a CSRF token from an operator's page, the viewer's POST is refused.
        with httpx.Client(base_url=server.url, auth=("x", OPERATOR)) as operator:
            found = CSRF.search(operator.get("/jobs").text)
            assert found is not None
        refused = viewer.post("/actions/retry-job", data={
            "job_id": str(job_id), "confirmed": "yes", "csrf": found.group(1)})
        assert refused.status_code == 403 and "may look, not act" in refused.text
        api = viewer.post("/api/actions/retry-job", json={"job_id": job_id},
                          headers={"Authorization": f"Bearer {VIEWER}"})
        assert api.status_code == 403
        assert api.json() == {"error": "the viewer token may look, not act"}
    assert job_state(dsn, job_id) == "dead"
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": f"Bearer {OPERATOR}"}) as operator:
        assert operator.get("/api/").json()["role"] == "operator"
        assert 'data-action="retry-job"' in operator.get(f"/jobs/{job_id}").text
        done = operator.post("/api/actions/retry-job", json={"job_id": job_id})
        assert done.status_code == 200
    assert job_state(dsn, job_id) == "queued"
    assert httpx.get(server.url).status_code == 401


def test_a_weak_or_shared_viewer_token_is_refused(dsn: str) -> None:
    short = run_web([], env={"PGFLEET_WEB_VIEWER_TOKEN": "short"})
    assert short.returncode == 2
    assert "PGFLEET_WEB_VIEWER_TOKEN: the token has 5 characters, fewer than 16" in short.stderr
    same = run_web([], env={"PGFLEET_WEB_VIEWER_TOKEN": OPERATOR,
                            "PGFLEET_WEB_TOKEN": OPERATOR})
    assert same.returncode == 2
    assert "the viewer token is the operator's token" in same.stderr


def test_a_read_only_ui_runs_as_a_role_that_may_only_select(
        web: Callable[..., WebServer], dsn: str) -> None:
    job_id = dead_job(dsn, queue="mail")
    with login_roles(dsn) as make:
        reader = make("web_reader")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgfleet TO {0};"
                                 " GRANT SELECT ON ALL TABLES IN SCHEMA pgfleet TO {0}")
                         .format(sql.Identifier(reader)))
        server = web("--read-only", env={"PGFLEET_DATABASE_URL": role_dsn(dsn, reader)})
        with httpx.Client(base_url=server.url) as client:
            for path in ("/", "/jobs", f"/jobs/{job_id}", "/queues/mail", "/hosts",
                         "/schedules", "/api/overview", "/jobs?state=scheduled"):
                assert client.get(path).status_code == 200, path
        server.stop()
