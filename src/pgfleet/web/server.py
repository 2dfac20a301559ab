"""Running the UI: check the settings and the database, bind, then serve until stopped."""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from pgfleet.errors import PgfleetError
from pgfleet.sql import migrate as migrations
from pgfleet.sql.db import connect
from pgfleet.web.app import create_app
from pgfleet.web.heads import descriptor_limit, head_guarded
from pgfleet.web.settings import TOKEN_ENV, WebSettings

# Loopback keeps other machines out, not other accounts of this one (docs/security.md).
OPEN_TO_LOCAL_USERS = (f"no token or basic auth: every local user of this host can use it "
                       f"(set {TOKEN_ENV} or a token file to keep them out)")
# On a stop, requests in flight get this long before their connections are closed.
STOP_GRACE = 5.0
# A connection idle this long between requests is closed (uvicorn's keep-alive timeout).
IDLE_DEADLINE = 5
# A request head larger than this is answered 400 (h11 buffers no more).
HEAD_LIMIT = 16 * 1024


def serve(settings: WebSettings) -> None:
    """Refuse a non-loopback bind without auth and a database without the schema, then
    serve on the listening socket until SIGINT or SIGTERM. Prints the URL once bound
    (port 0 picks a free one)."""
    settings.check()
    with connect(settings.dsn) as conn:
        if migrations.current_version(conn) == 0:
            raise PgfleetError("the pgfleet schema is not installed: run `pgfleet migrate`")
    sock = bind(settings.host, settings.port)
    mode = " (read-only)" if settings.read_only else ""
    print(f"pgfleet web: serving on {url_of(sock, settings.tls)}{mode}", flush=True)
    if not settings.has_auth:
        print(f"pgfleet web: {OPEN_TO_LOCAL_USERS}", file=sys.stderr, flush=True)
    _Server(server_config(settings, timeout_graceful_shutdown=STOP_GRACE)).run(sockets=[sock])
    sys.stdout.flush()


class _Server(uvicorn.Server):
    """uvicorn's server, but a stop signal ends it cleanly: uvicorn raises the signal again
    once it has shut down, so TERM would end the process with 143 although nothing failed
    (and INT with a KeyboardInterrupt). Here both stop it gracefully and it returns."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def server_config(settings: WebSettings, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for the UI: deadlines and caps for connections before any
    request reaches the app, no Server header, no access log, and proxy headers
    read only when the operator said a proxy is in front (uvicorn's default reads
    X-Forwarded-For/-Proto from any loopback peer, which every local user is)."""
    # Connections that have not sent a head are cut by heads.head_guarded; a request
    # beyond half the descriptor limit is answered 503 at once rather than queued.
    return uvicorn.Config(create_app(settings), log_level="warning", server_header=False,
                          access_log=False, lifespan="on", http=head_guarded(),
                          timeout_keep_alive=IDLE_DEADLINE,
                          limit_concurrency=max(32, descriptor_limit() // 2),
                          h11_max_incomplete_event_size=HEAD_LIMIT,
                          proxy_headers=settings.behind_proxy,
                          ssl_certfile=settings.tls_cert, ssl_keyfile=settings.tls_key,
                          **options)


def url_of(sock: socket.socket, tls: bool = False) -> str:
    """The URL a bound socket serves, `http://127.0.0.1:8080/` (IPv6 in brackets)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}/"


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PgfleetError(f"--listen {host}:{port}: cannot bind: {exc.strerror}") from None
    sock.listen(128)
    return sock
