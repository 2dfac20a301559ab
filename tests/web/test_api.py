"""The JSON API: every page's data and every action, under the UI's authentication, with
a bearer token for scripts and the CSRF token for anything a browser could replay."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import psycopg

from tests.web.conftest import WebServer, dead_job, insert_job, job_state
from tests.web.test_http import exists

TOKEN = "api-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_every_page_reads_as_json(web: Callable[..., WebServer], dsn: str) -> None:
    job_id = insert_job(dsn, queue="img", task="resize", state="succeeded", attempt=1,
                        started_at="now", finished_at="now", result='{"w": 640}',
                        meta='{"tenant": "acme"}', args='{"path": "a.png"}')
    dead = dead_job(dsn, queue="img")
    later = insert_job(dsn, queue="img", run_at="2999-01-01T00:00:00Z")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.processes (id, host, pid, kind, queue, supervisor)"
                     " VALUES ('h:1:w', 'h', 1, 'worker', 'img', NULL)")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        index = client.get("/api/")
        assert index.headers["content-type"] == "application/json"
        assert "bulk-retry" in index.json()["actions"] and len(index.json()["csrf"]) == 64

        overview = client.get("/api/overview").json()
        [img] = [q for q in overview["queues"] if q["queue"] == "img"]
        assert (img["scheduled"], img["dead"]) == (1, 1)
        assert len(overview["activity"]["minutes"]) == 60
        assert sum(m["succeeded"] for m in overview["activity"]["minutes"]) == 1

        listed = client.get("/api/jobs", params={"queue": "img"}).json()
        states = {j["id"]: j["state"] for j in listed["jobs"]}
        assert states == {job_id: "succeeded", dead: "dead", later: "scheduled"}
        assert listed["older"] is None
        bad = client.get("/api/jobs", params={"state": "lost"})
        assert bad.status_code == 400 and "state must be one of" in bad.json()["error"]

        job = client.get(f"/api/jobs/{job_id}").json()
        assert job["values"] == {"args": {"path": "a.png"}, "meta": {"tenant": "acme"},
                                 "result": {"w": 640}, "progress": None}
        assert job["job"]["shown_state"] == "succeeded"
        assert job["job"]["finished_at"].endswith("+00:00")
        assert client.get(f"/api/jobs/{dead}").json()["attempts"][0]["error"] \
            == "ValueError: boom"
        missing = client.get("/api/jobs/999999")
        assert missing.status_code == 404 and "does not exist" in missing.json()["error"]
        assert client.get(f"/api/jobs/{job_id}/result").json() == {"w": 640}

        queue = client.get("/api/queues/img").json()
        assert queue["queue"]["dead"] == 1 and queue["workers"][0]["id"] == "h:1:w"
        hosts = client.get("/api/hosts").json()
        assert hosts["hosts"][0]["host"] == "h"
        schedules = client.get("/api/schedules").json()
        assert schedules["runs"] == {} and schedules["now"].endswith("+00:00")


def test_a_script_acts_with_its_bearer_token(web: Callable[..., WebServer], dsn: str) -> None:
    dead = [dead_job(dsn, queue="mail") for _ in range(3)]
    waiting = insert_job(dsn, queue="mail")
    server = web(env={"PGFLEET_WEB_TOKEN": TOKEN})
    with httpx.Client(base_url=server.url, headers=BEARER) as client:
        assert httpx.get(server.url + "api/overview").status_code == 401
        retried = client.post("/api/actions/retry-job", json={"job_id": dead[0]})
        assert retried.status_code == 200
        assert retried.json() == {"done": "retry-job", "see": f"/jobs/{dead[0]}"}
        assert job_state(dsn, dead[0]) == "queued"
        again = client.post("/api/actions/retry-job", json={"job_id": dead[0]})
        assert again.status_code == 409 and "not dead or cancelled" in again.json()["error"]
        bulk = client.post("/api/actions/bulk-retry", json={"ids": [*dead, waiting]})
        assert bulk.json() == {"done": "Retried 2 of 4 jobs. The other 2 were not dead or "
                                       "cancelled with a free unique key (or no longer "
                                       "exist).", "changed": 2, "reached": 4}
        matching = client.post("/api/actions/bulk-cancel",
                               json={"matching": True, "queue": "mail", "state": "queued"})
        assert matching.json()["changed"] == 4
        assert all(job_state(dsn, i) == "cancelled" for i in [*dead, waiting])
        deleted = client.post("/api/actions/delete-job", json={"job_id": waiting})
        assert deleted.status_code == 200 and not exists(dsn, waiting)
        paused = client.post("/api/actions/pause-queue", json={"queue": "mail"})
        assert paused.status_code == 200
        assert client.get("/api/queues/mail").json()["queue"]["paused"] is True

        for body, error in [({"job_id": "x"}, "job_id must be a positive whole number"),
                            ({"job": 1}, "unknown field 'job'"),
                            ({"ids": ["1"]}, "only ids is a list"),
                            ([1], "must be a JSON object")]:
            refused = client.post("/api/actions/retry-job" if "job" in str(body)
                                  or body == [1] else "/api/actions/bulk-retry", json=body)
            assert refused.status_code == 400 and error in refused.json()["error"], body
        form = client.post("/api/actions/retry-job", data={"job_id": str(dead[0])})
        assert form.status_code == 415


def test_without_a_bearer_token_an_action_needs_the_csrf_token(
        web: Callable[..., WebServer], dsn: str) -> None:
    job_id = dead_job(dsn)
    server = web()  # loopback, no token: any Bearer passes the guard, so it proves nothing
    with httpx.Client(base_url=server.url) as client:
        token = client.get("/api/").json()["csrf"]
        for headers in ({}, {"Authorization": "Bearer anything"},
                        {"X-CSRF-Token": "0" * 64}):
            refused = client.post("/api/actions/retry-job", json={"job_id": job_id},
                                  headers=headers)
            assert refused.status_code == 403, headers
        assert job_state(dsn, job_id) == "dead"
        # Another origin's page is refused before the token is even looked at.
        foreign = client.post("/api/actions/retry-job", json={"job_id": job_id},
                              headers={"X-CSRF-Token": token, "Sec-Fetch-Site": "cross-site"})
        assert foreign.status_code == 403 and job_state(dsn, job_id) == "dead"
        done = client.post("/api/actions/retry-job", json={"job_id": job_id},
                           headers={"X-CSRF-Token": token})
        assert done.status_code == 200 and job_state(dsn, job_id) == "queued"


def test_read_only_refuses_api_actions(web: Callable[..., WebServer], dsn: str) -> None:
    job_id = dead_job(dsn)
    server = web("--read-only", env={"PGFLEET_WEB_TOKEN": TOKEN})
    with httpx.Client(base_url=server.url, headers=BEARER) as client:
        assert client.get("/api/").json()["read_only"] is True
        refused = client.post("/api/actions/retry-job", json={"job_id": job_id})
        assert refused.status_code == 403 and refused.json() == {"error": "this UI is read-only"}
    assert job_state(dsn, job_id) == "dead"
