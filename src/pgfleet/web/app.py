"""The Starlette application: routes, the guard, the database pool, error pages."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pgfleet.errors import DatabaseUnavailable, PgfleetError
from pgfleet.sql.db import scrub, session_kwargs
from pgfleet.sql.far_times import accept_far_times
from pgfleet.web import actions, pages
from pgfleet.web.rendering import busy, json_response, render
from pgfleet.web.security import Guard
from pgfleet.web.settings import WebSettings

# A page is a person waiting: a query that takes longer than this is cut off and said so,
# so no read holds one of the pool's connections for longer.
STATEMENT_TIMEOUT_MS = 3_000
POOL_SIZE = 4
# A text search reads whole rows (args of a megabyte each): at most this many run at once,
# so the other connections of the pool stay free for every other page.
SEARCHES = 2
# How long a page waits for a connection before saying the database is unreachable.
POOL_TIMEOUT = 5.0
# How long the pool keeps retrying a connection, with doubling waits, before it gives up
# until a page asks again. psycopg_pool's default (5 minutes) let the waits grow past
# 30 s in an outage: the UI then lagged that long behind the database coming back. Given
# up, the pool starts afresh at the next page's request, so it never waits over 2 s.
RECONNECT_TIMEOUT = 3.0


def configure_connection(conn: psycopg.Connection[Any]) -> None:
    # Custom plans fold the optional filters of sql/web.sql away, so each one can use its
    # index; a generic plan would keep "$1 IS NULL OR ..." and scan.
    conn.execute("SET plan_cache_mode = force_custom_plan")
    # As pgfleet.sql.db.connect: no page spends seconds compiling a millisecond query.
    conn.execute("SET jit = off")
    conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
    # A row holding 'infinity' or year 10000 (written by hand) is shown, not a 503.
    accept_far_times(conn)


def create_pool(settings: WebSettings) -> ConnectionPool[Any]:
    # The session setup of every other pgfleet connection: search_path pinned, so an
    # operator planted in public never runs as the UI's role.
    kwargs = session_kwargs(settings.dsn, autocommit=True, connect_timeout=5)
    # check: a connection broken by a database restart is replaced before a page gets it,
    # so the first page after the restart is not an error.
    return ConnectionPool(settings.dsn, min_size=1, max_size=POOL_SIZE, open=False,
                          timeout=POOL_TIMEOUT, reconnect_timeout=RECONNECT_TIMEOUT,
                          kwargs=kwargs, configure=configure_connection,
                          check=ConnectionPool.check_connection, name="pgfleet-web")


def create_app(settings: WebSettings, pool: ConnectionPool[Any] | None = None) -> Starlette:
    """The app; it opens the pool (a new one unless given) at start-up, in the process that
    serves, and closes it at shutdown."""
    the_pool = pool if pool is not None else create_pool(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        the_pool.open()
        try:
            yield
        finally:
            the_pool.close()

    static = StaticFiles(directory=str(resources.files("pgfleet.web") / "static"))
    app = Starlette(
        routes=[
            Route("/", pages.overview),
            Route("/jobs", pages.jobs),
            Route("/jobs/{job_id}", pages.job),
            Route("/jobs/{job_id}/result", pages.job_result),
            Route("/queues/{name:path}", pages.queue),
            Route("/hosts", pages.hosts),
            Route("/schedules", pages.schedules),
            Route("/actions/{name}", actions.act, methods=["POST"]),
            # The same pages and actions as JSON, for scripts (docs/web.md, "JSON API").
            Route("/api/", api_index),
            Route("/api/overview", pages.overview),
            Route("/api/jobs", pages.jobs),
            Route("/api/jobs/{job_id}", pages.job),
            Route("/api/jobs/{job_id}/result", pages.job_result),
            Route("/api/queues/{name:path}", pages.queue),
            Route("/api/hosts", pages.hosts),
            Route("/api/schedules", pages.schedules),
            Route("/api/actions/{name}", actions.act_api, methods=["POST"]),
            Mount("/static", static, name="static"),
        ],
        middleware=[Middleware(Guard, settings=settings)],
        exception_handlers={
            psycopg.Error: _database_error, PoolTimeout: _database_error,
            PgfleetError: _database_error,
        },
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.pool = the_pool
    app.state.searches = threading.BoundedSemaphore(SEARCHES)
    return app


def api_index(request: Request) -> Response:
    """What the API offers, and the CSRF token a client without a bearer token sends."""
    return json_response({
        "csrf": request.state.csrf, "read_only": request.state.read_only,
        "role": request.state.role,
        "pages": ["/api/overview", "/api/jobs", "/api/jobs/ID", "/api/jobs/ID/result",
                  "/api/queues/NAME", "/api/hosts", "/api/schedules"],
        "actions": sorted(actions.ACTIONS)})


def _all_lent(pool: ConnectionPool[Any]) -> bool:
    """Is every connection of the pool lent out (busy), rather than none to be had (the
    database unreachable)?"""
    stats = pool.get_stats()
    return stats.get("pool_size", 0) - stats.get("pool_available", 0) >= pool.max_size


async def _database_error(request: Request, exc: Exception) -> Response:
    """A page, not a traceback: what failed, in one line without the password. It stays
    live, so it turns back into the page asked for once the database answers."""
    dsn = request.app.state.settings.dsn
    # An action that met a busy pool may or may not have happened: said below instead.
    if request.method == "POST":
        pass
    elif isinstance(exc, psycopg.errors.QueryCanceled):
        return busy(request, f"This page took longer than {STATEMENT_TIMEOUT_MS // 1000} s "
                             "and was stopped (a narrower filter reads less).")
    elif isinstance(exc, PoolTimeout) and _all_lent(request.app.state.pool):
        return busy(request, "Every database connection of the UI is in use.")
    if isinstance(exc, PoolTimeout):
        text = f"no connection could be made within {POOL_TIMEOUT:.0f}s"
    else:
        lines = str(exc).strip().splitlines()
        text = scrub(lines[0] if lines else type(exc).__name__, dsn)
    if isinstance(exc, PoolTimeout | psycopg.OperationalError | DatabaseUnavailable):
        title, message = "Database unreachable", f"The database is unreachable: {text}."
    else:
        title, message = "Database error", f"The database failed this request: {text}."
    if request.method == "POST":
        # An action is never repeated by itself (and its URL answers no GET): say that
        # it may not have happened, and let the person look before trying again.
        return render(request, "message.html", 503, title=title, live=False,
                      message=f"{message} The action may not have been carried out: look "
                              "at the job or queue once the database answers, then try "
                              "again.")
    return render(request, "message.html", 503, title=title, live=True,
                  message=f"{message} Nothing here is current; this page tries again by itself.")
