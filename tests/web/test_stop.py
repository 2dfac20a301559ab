"""`pgfleet web` stopped by a real signal: TERM (systemd, the supervisor, docker stop) and
INT (Ctrl-C) both end it cleanly with exit status 0, also with a client that never
finishes its request holding a connection open."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest

from pgfleet.web.actions import BODY_DEADLINE
from pgfleet.web.server import STOP_GRACE
from tests.web.conftest import WebServer


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_stop_signal_exits_0(web: Callable[..., WebServer], dsn: str,
                               sig: signal.Signals) -> None:
    server = web()
    parts = urlsplit(server.url)
    assert parts.hostname and parts.port
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/").status_code == 200
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as slow:
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
        server.proc.send_signal(sig)
        assert server.proc.wait(timeout=30) == 0
    assert server.proc.stdout is not None
    rest = server.proc.stdout.read()
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest


HALF_A_FORM = (b"POST /actions/retry-job HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n"
               b"\r\njob_id=1")


def test_a_half_sent_form_does_not_hold_the_stop(web: Callable[..., WebServer],
                                                 dsn: str) -> None:
    # It held the stop for the whole grace, then was cancelled with a traceback.
    server = web()
    parts = urlsplit(server.url)
    assert parts.hostname and parts.port
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as slow:
        slow.sendall(HALF_A_FORM)
        with httpx.Client(base_url=server.url) as client:  # the head has been read
            assert client.get("/").status_code == 200
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=30) == 0
        assert time.monotonic() - started < STOP_GRACE - 1
    assert server.proc.stdout is not None
    rest = server.proc.stdout.read()
    assert "Traceback" not in rest and "CancelledError" not in rest, rest


def test_a_form_that_never_arrives_is_cut_after_the_body_deadline(
        web: Callable[..., WebServer], dsn: str) -> None:
    server = web()
    parts = urlsplit(server.url)
    assert parts.hostname and parts.port
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as slow:
        slow.sendall(HALF_A_FORM)
        started = time.monotonic()
        answer = slow.recv(4096)
        waited = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert BODY_DEADLINE - 1 < waited < BODY_DEADLINE + 5
        while chunk := slow.recv(4096):  # the rest of the answer, then the close
            answer += chunk
        assert answer.endswith(b"the form did not arrive within 10 s\n")
