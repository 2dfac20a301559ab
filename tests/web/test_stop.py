"""`pgfleet web` stopped by a real signal: TERM (systemd, the supervisor, docker stop) and
INT (Ctrl-C) both end it cleanly with exit status 0, also with a client that never
finishes its request holding a connection open."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest

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
