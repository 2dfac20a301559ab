"""Extra login roles for the security tests, and the operator an attacker plants in public."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support import pg


def role_dsn(owner_dsn: str, role: str) -> str:
    params = conninfo_to_dict(owner_dsn)
    params.update(user=role)
    params.pop("password", None)
    return make_conninfo(**params)


@contextmanager
def login_roles(owner_dsn: str) -> Iterator[Callable[[str], str]]:
    """`make(prefix)` creates a LOGIN role with no other attribute and returns its name;
    every role made is dropped, with what it owns in this database, at the end."""
    made: list[str] = []

    def make(prefix: str) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(owner_dsn, autocommit=True) as conn:
            pg.ensure_role(conn, name)
        made.append(name)
        return name

    try:
        yield make
    finally:
        with psycopg.connect(owner_dsn, autocommit=True) as conn:
            for name in made:
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


# An exact-type `=` for pgfleet.job_state: operator resolution prefers it to pg_catalog's
# generic anyenum = anyenum wherever public is on the search_path. It answers correctly,
# so nothing breaks, and records who ran it: that is the attacker's code running.
TRAP = """
CREATE TABLE public.trap_hits (who text NOT NULL, at timestamptz NOT NULL DEFAULT now());
GRANT INSERT, SELECT ON public.trap_hits TO PUBLIC;
CREATE FUNCTION public.trap_eq(a pgfleet.job_state, b pgfleet.job_state) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.trap_hits (who) VALUES (current_user);
    RETURN a::text = b::text;
END;
$$;
CREATE OPERATOR public.= (LEFTARG = pgfleet.job_state, RIGHTARG = pgfleet.job_state,
                          FUNCTION = public.trap_eq);
"""


def plant_trap(owner_dsn: str, attacker: str) -> None:
    """As the owner, give `attacker` what PostgreSQL <= 14 gave everyone (CREATE on public)
    and USAGE on pgfleet (a producer has it); as `attacker`, plant the operator. Then
    prove it is live: a comparison through the default search_path runs it."""
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        ident = sql.Identifier(attacker)
        conn.execute(sql.SQL("GRANT CREATE, USAGE ON SCHEMA public TO {}").format(ident))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgfleet TO {}").format(ident))
    with psycopg.connect(role_dsn(owner_dsn, attacker), autocommit=True) as conn:
        conn.execute(TRAP.encode())
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute("SELECT 'queued'::pgfleet.job_state = 'queued'::pgfleet.job_state")
        assert trap_hits(conn) == ["postgres"], "the planted operator is not live"
        conn.execute("DELETE FROM public.trap_hits")


def trap_hits(conn: psycopg.Connection[Any]) -> list[str]:
    return [row[0] for row in conn.execute("SELECT who FROM public.trap_hits ORDER BY at")]
