"""Loopback keeps other machines out, not other accounts of the same host: without a
token any local program can read and act (as docs/security.md says, and `pgfleet web`
warns at start); a token, opted into on loopback, keeps them out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.web.conftest import WebServer, dead_job, job_state, write_secret
from tests.web.test_http import csrf_of

WARNING = ("pgfleet web: no token or basic auth: every local user of this host can use it "
           "(set PGFLEET_WEB_TOKEN or a token file to keep them out)")


def test_without_a_token_any_local_client_can_act(web: Callable[..., WebServer],
                                                  dsn: str) -> None:
    job = dead_job(dsn)
    server = web()
    # Not a browser: no Origin, no Sec-Fetch-Site; it reads the token like a page does.
    with httpx.Client(base_url=server.url) as program:
        done = program.post("/actions/retry-job", data={
            "job_id": str(job), "confirmed": "yes", "csrf": csrf_of(program)})
    assert done.status_code == 303 and job_state(dsn, job) == "queued"
    assert server.proc.stdout is not None
    assert server.proc.stdout.readline().rstrip("\n") == WARNING


def test_a_token_on_loopback_keeps_local_users_out(web: Callable[..., WebServer], dsn: str,
                                                   tmp_path: Path) -> None:
    job = dead_job(dsn)
    token = tmp_path / "token"
    write_secret(token, "local-secret-0123456789\n")
    server = web("--token-file", str(token))
    assert server.url.startswith("http://127.0.0.1:")
    with httpx.Client(base_url=server.url) as stranger:
        assert stranger.get("/").status_code == 401
        assert stranger.get(f"/jobs/{job}").status_code == 401
        refused = stranger.post("/actions/retry-job",
                                data={"job_id": str(job), "confirmed": "yes"})
        assert refused.status_code == 401
    bearer = {"Authorization": "Bearer local-secret-0123456789"}
    with httpx.Client(base_url=server.url, headers=bearer) as owner:
        assert owner.get("/").status_code == 200
        done = owner.post("/actions/retry-job", data={
            "job_id": str(job), "confirmed": "yes", "csrf": csrf_of(owner)})
        assert done.status_code == 303
    assert job_state(dsn, job) == "queued"
