"""The UI under load and attack: a planted operator, slow clients, searches over huge
rows, a busy pool, weak tokens and guessed credentials."""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from pgfleet.web.heads import HEAD_DEADLINE
from tests.support.roles import login_roles, plant_trap, trap_hits
from tests.web.conftest import WebServer, dead_job, insert_job, run_web, write_secret


def test_an_operator_planted_in_public_never_runs_in_the_ui(
        web: Callable[..., WebServer], dsn: str) -> None:
    job_id = dead_job(dsn)
    insert_job(dsn)
    with login_roles(dsn) as make:
        plant_trap(dsn, make("attacker"))
        server = web()
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for path in ("/", "/jobs", "/jobs?state=dead", "/jobs?state=queued&task=noop",
                         "/jobs?q=boom", f"/jobs/{job_id}", "/schedules"):
                assert client.get(path).status_code == 200, path
        server.stop()
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert trap_hits(conn) == []


@pytest.mark.parametrize(("token", "where"), [
    ("short-token", "PGFLEET_WEB_TOKEN"), ("0123456789abcde", "PGFLEET_WEB_TOKEN"),
    ("short-token", "--token-file")])
def test_a_token_shorter_than_16_characters_is_refused(dsn: str, tmp_path: Path,
                                                       token: str, where: str) -> None:
    if where == "--token-file":
        path = tmp_path / "token"
        write_secret(path, token + "\n")
        result = run_web(["--token-file", str(path)], env={"PGFLEET_WEB_TOKEN": ""})
        where = f"--token-file {path}"
    else:
        result = run_web([], env={"PGFLEET_WEB_TOKEN": token})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"pgfleet: error: {where}: the token has {len(token)} characters, fewer than 16 "
        "(e.g. `openssl rand -hex 32`)")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o620])
@pytest.mark.parametrize("option", ["--token-file", "--basic-auth-file"])
def test_a_secret_file_open_to_others_is_refused(dsn: str, tmp_path: Path, mode: int,
                                                 option: str) -> None:
    path = tmp_path / "secret"
    path.write_text("ops:a-password-of-some-length\n")
    path.chmod(mode)
    result = run_web([option, str(path)])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"pgfleet: error: {option} {path}: group or others may open it (mode {mode:04o}): "
        "chmod 600 it")


def test_wrong_credentials_are_answered_slowly(web: Callable[..., WebServer],
                                               dsn: str) -> None:
    token = "a-token-long-enough-0123"
    server = web(env={"PGFLEET_WEB_TOKEN": token})

    def guess(n: int) -> int:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            return client.get("/", headers={"Authorization": f"Bearer guess-{n}"}).status_code

    started = time.monotonic()
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(guess, range(60)))
    elapsed = time.monotonic() - started
    assert answers == [401] * 60
    # Unslowed, this machine answered 302 wrong guesses a second.
    assert 60 / elapsed < 12, f"{60 / elapsed:.1f} guesses/s"
    with httpx.Client(base_url=server.url, timeout=30) as client:
        right = time.monotonic()
        assert client.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert time.monotonic() - right < 2


def test_the_csrf_cookie_is_secure_behind_a_proxy(web: Callable[..., WebServer],
                                                   dsn: str) -> None:
    for args, secure in (((), False), (("--behind-proxy",), True)):
        server = web(*args)
        with httpx.Client(base_url=server.url) as client:
            cookie = client.get("/").headers["set-cookie"]
        assert cookie.startswith("pgfleet_csrf=") and "HttpOnly" in cookie
        assert ("; Secure" in cookie) is secure, cookie


def test_clients_trickling_their_heads_are_cut_and_keep_nobody_out(
        web: Callable[..., WebServer], dsn: str) -> None:
    insert_job(dsn)
    server = web()
    # As in the outside trial: with 256 descriptors, 300 trickling clients took them all.
    resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, (256, 256))
    parts = urlsplit(server.url)
    assert parts.hostname and parts.port
    opened: list[tuple[socket.socket, float]] = []
    closed: dict[int, float] = {}
    try:
        for _ in range(300):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
            sock.setblocking(False)
            opened.append((sock, time.monotonic()))
        header = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 200
        started = time.monotonic()
        answered: list[float] = []
        sent = 0
        while time.monotonic() - started < HEAD_DEADLINE + 4 and len(closed) < len(opened):
            for n, (sock, _) in enumerate(opened):
                if n not in closed:
                    trickle(sock, header[sent % len(header):][:1], n, closed)
            sent += 1
            if len(answered) < 5:
                asked = time.monotonic()
                with httpx.Client(base_url=server.url, timeout=10) as client:
                    assert client.get("/jobs").status_code == 200
                answered.append(time.monotonic() - asked)
            time.sleep(0.5)
        assert max(answered) < 3, answered
        assert len(closed) == len(opened), f"{len(opened) - len(closed)} still open"
        newest_opened = opened[-1][1]
        lifetime = closed[len(opened) - 1] - newest_opened
        assert HEAD_DEADLINE - 1 < lifetime < HEAD_DEADLINE + 4, lifetime
    finally:
        for sock, _ in opened:
            sock.close()


def trickle(sock: socket.socket, byte: bytes, n: int, closed: dict[int, float]) -> None:
    """Send one more byte of the head; note when the server has closed the connection."""
    try:
        if sock.recv(1024) == b"":
            closed[n] = time.monotonic()
            return
    except BlockingIOError:
        pass
    except OSError:
        closed[n] = time.monotonic()
        return
    try:
        sock.send(byte)
    except BlockingIOError:
        pass
    except OSError:
        closed[n] = time.monotonic()


def test_searches_over_huge_args_never_take_the_pool(web: Callable[..., WebServer],
                                                     dsn: str) -> None:
    # 300 producer-sized rows (1 MB of args each): one search over them takes seconds.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("INSERT INTO pgfleet.jobs (task, queue, args) SELECT 'noop', 'default',"
                     " jsonb_build_object('blob', repeat(md5(g::text), 31250))"
                     " FROM generate_series(1, 300) g")
    job_id = dead_job(dsn)
    server = web()

    def search(n: int) -> httpx.Response:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            return client.get("/jobs", params={"q": f"needle {n}"})

    with ThreadPoolExecutor(6) as pool:
        searches = [pool.submit(search, n) for n in range(6)]
        time.sleep(0.5)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for path in ("/", f"/jobs/{job_id}", "/schedules", "/jobs?state=dead") * 2:
                asked = time.monotonic()
                assert client.get(path).status_code == 200, path
                assert time.monotonic() - asked < 2, path
        answers = [future.result() for future in searches]
    for answer in answers:
        assert answer.status_code in (200, 503), answer.status_code
        assert "unreachable" not in answer.text
        if answer.status_code == 503:
            assert answer.headers["retry-after"] == "2"
            assert "busy, try again" in answer.text
    assert any(answer.status_code == 503 for answer in answers)


def peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def test_a_job_of_tens_of_megabytes_is_clipped_before_it_reaches_the_ui(
        web: Callable[..., WebServer], dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        row = conn.execute(
            "INSERT INTO pgfleet.jobs (task, queue, state, args, errors) SELECT 'noop',"
            " 'default', 'dead', jsonb_build_object('blob', repeat(md5('a'), 625000)),"
            " jsonb_build_array(jsonb_build_object('attempt', 1, 'error',"
            " repeat(md5('b'), 625000))) RETURNING id").fetchone()
    assert row is not None
    server = web()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/").status_code == 200
    before = peak_rss_mb(server.proc.pid)

    def view(_: int) -> httpx.Response:
        # Six views share a pool of four: a busy answer is what a browser retries.
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for _ in range(20):
                page = client.get(f"/jobs/{row[0]}")
                if page.status_code != 503:
                    return page
                assert page.headers["Retry-After"] and "busy" in page.text
                time.sleep(0.5)
            return page

    with ThreadPoolExecutor(6) as pool:
        pages = list(pool.map(view, range(6)))
    for page in pages:
        assert page.status_code == 200 and "more characters)" in page.text
        assert len(page.content) < 500_000
    # Six views of 40 MB each, read whole, grew the process by hundreds of megabytes.
    assert peak_rss_mb(server.proc.pid) - before < 60
