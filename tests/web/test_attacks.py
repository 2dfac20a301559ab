"""The UI from an attacker's side, over plain HTTP: forms from another origin, Host names
that rebind to loopback, oversized bodies and rows, and clients that never finish."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest

from tests.web.conftest import WebServer, dead_job, insert_job, job_state
from tests.web.test_http import csrf_of


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
    # Another port of the same host is the same *site*: SameSite lets the cookie through.
    {"Sec-Fetch-Site": "same-site"},
    # Outside trial T7: "none" let any Origin through.
    {"Sec-Fetch-Site": "none", "Origin": "http://evil.example"},
], ids=["origin", "null-origin", "cross-site", "same-site", "none-with-foreign-origin"])
def test_a_form_from_another_origin_is_refused_even_with_the_token(
        web: Callable[..., WebServer], dsn: str, headers: dict[str, str]) -> None:
    job_id = dead_job(dsn)
    server = web()
    with httpx.Client(base_url=server.url) as client:
        form = {"job_id": str(job_id), "confirmed": "yes", "csrf": csrf_of(client)}
        refused = client.post("/actions/retry-job", data=form, headers=headers)
        assert refused.status_code == 403 and "another origin" in refused.text
        assert job_state(dsn, job_id) == "dead"
        own = urlsplit(server.url).netloc
        done = client.post("/actions/retry-job", data=form,
                           headers={"Origin": f"http://{own}", "Sec-Fetch-Site": "same-origin"})
        assert done.status_code == 303
        assert job_state(dsn, job_id) == "queued"


def raw_request(server: WebServer, request: bytes) -> bytes:
    parts = urlsplit(server.url)
    assert parts.hostname and parts.port
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("host", [
    "127.0.0.1.evil.example", "localhost.evil.example", "evil.example:80",
    "127.1", "0.0.0.0:8080", "127.0.0.1@evil.example",
])
def test_a_host_name_that_only_resolves_to_loopback_is_refused(
        web: Callable[..., WebServer], dsn: str, host: str) -> None:
    insert_job(dsn)
    server = web()
    answer = raw_request(server, f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                         .encode())
    assert answer.startswith((b"HTTP/1.1 421", b"HTTP/1.1 400")), answer[:200]
    assert b"Overview" not in answer


def test_a_huge_form_is_refused_before_it_is_read(web: Callable[..., WebServer],
                                                  dsn: str) -> None:
    dead_job(dsn)
    server = web()
    with httpx.Client(base_url=server.url) as client:
        token = csrf_of(client)
        cookie = client.cookies["pgfleet_csrf"]
    netloc = urlsplit(server.url).netloc
    # Announces a gigabyte and sends a little: answered at once, the rest never awaited.
    answer = raw_request(server, (
        f"POST /actions/retry-job HTTP/1.1\r\nHost: {netloc}\r\nCookie: pgfleet_csrf={cookie}"
        "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000000000"
        f"\r\nConnection: close\r\n\r\ncsrf={token}&job_id=1").encode())
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # No length announced (chunked): read up to the limit, then refused.
    with httpx.Client(base_url=server.url) as client:
        client.cookies.set("pgfleet_csrf", cookie)
        big = client.post("/actions/retry-job", content=iter([b"job_id=1&x=", b"a" * 40_000]),
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert big.status_code == 413


def test_huge_rows_are_shown_clipped(web: Callable[..., WebServer], dsn: str) -> None:
    errors = [{"attempt": n, "at": "2026-01-01T00:00:00Z", "error": f"E{n} " + "x" * 2000}
              for n in range(1, 3001)]
    job_id = dead_job(dsn, args=json.dumps({"blob": "y" * 3_000_000}),
                      errors=json.dumps(errors), legacy=True)
    server = web()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        page = client.get(f"/jobs/{job_id}")
        assert page.status_code == 200, page.text[-600:]
        assert len(page.content) < 1_000_000
        assert "2950 earlier attempts not shown" in page.text
        assert "E3000 " in page.text and "E2950 " not in page.text
        assert "more characters)" in page.text
        listing = client.get("/jobs")
        assert listing.status_code == 200 and len(listing.content) < 1_000_000


def test_slow_clients_do_not_keep_others_out(web: Callable[..., WebServer], dsn: str) -> None:
    insert_job(dsn)
    server = web()
    parts = urlsplit(server.url)
    assert parts.hostname and parts.port
    slow = []
    try:
        for _ in range(300):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
            # Headers begun, never finished; a body promised, never sent.
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            slow.append(sock)
        for _ in range(20):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
            sock.sendall(f"POST /actions/retry-job HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                         "Content-Length: 1000\r\n\r\njob_id=".encode())
            slow.append(sock)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for path in ("/", "/jobs", "/schedules"):
                assert client.get(path).status_code == 200
    finally:
        for sock in slow:
            sock.close()


def test_x_forwarded_host_counts_only_behind_a_proxy(web: Callable[..., WebServer],
                                                      dsn: str) -> None:
    # Outside trial: an Origin equal to X-Forwarded-Host was taken, and without a proxy in
    # front any client sends that header. Browsers too old for Sec-Fetch-Site send Origin.
    job_id = dead_job(dsn)
    forged = {"Origin": "http://evil.example", "X-Forwarded-Host": "evil.example"}
    answers = {}
    for mode in ((), ("--behind-proxy",)):
        server = web(*mode)
        own = urlsplit(server.url).netloc
        with httpx.Client(base_url=server.url) as client:
            form = {"job_id": str(job_id), "csrf": csrf_of(client)}  # the confirmation page
            # Behind a proxy the cookie is Secure, which httpx keeps from plain http: sent
            # by hand, as the browser sends it to the proxy's https.
            cookie = {"Cookie": f"pgfleet_csrf={client.cookies['pgfleet_csrf']}"}
            client.cookies.clear()
            answers[mode] = {
                "forged": client.post("/actions/retry-job", data=form,
                                      headers={**forged, **cookie}).status_code,
                "own host": client.post("/actions/retry-job", data=form,
                                        headers={"Origin": f"http://{own}", **cookie}
                                        ).status_code,
                "other, no forwarded host": client.post(
                    "/actions/retry-job", data=form,
                    headers={"Origin": "http://evil.example", **cookie}).status_code,
                "forwarded host, no token": client.post(
                    "/actions/retry-job", data={"job_id": str(job_id)},
                    headers={**forged, **cookie}).status_code,
            }
    assert answers[()] == {"forged": 403, "own host": 200, "other, no forwarded host": 403,
                           "forwarded host, no token": 403}
    # Behind a proxy the proxy sets X-Forwarded-Host to the name the browser used.
    assert answers[("--behind-proxy",)] == {
        "forged": 200, "own host": 200, "other, no forwarded host": 403,
        "forwarded host, no token": 403}
    assert job_state(dsn, job_id) == "dead"  # confirmation pages only: nothing was done
