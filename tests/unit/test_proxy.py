"""The fault tests' TCP proxy forwards to the server of the test DSN, not to a fixed port."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.pg import ADMIN_DSN
from tests.support.proxy import Proxy, server_address


@pytest.mark.parametrize(("dsn", "address"), [
    ("postgresql://postgres@127.0.0.1:5433/postgres", ("127.0.0.1", 5433)),
    ("postgresql://postgres@db.internal/postgres", ("db.internal", 5432)),
    ("host=a,b port=6001,6002 dbname=x", ("a", 6001)),
    ("host=db.internal hostaddr=10.0.0.7 port=6432", ("10.0.0.7", 6432)),
    ("host=/tmp port=5499 dbname=x", "/tmp/.s.PGSQL.5499"),
    ("dbname=x", "/var/run/postgresql/.s.PGSQL.5432"),
])
def test_the_server_address_comes_from_the_dsn(dsn: str, address: object) -> None:
    assert server_address(dsn) == address


def test_the_proxy_reaches_the_test_server_until_it_is_cut() -> None:
    target = server_address(ADMIN_DSN)
    port = target[1] if isinstance(target, tuple) else int(target.rsplit(".", 1)[1])
    proxy = Proxy()
    try:
        with psycopg.connect(proxy.dsn(ADMIN_DSN), autocommit=True) as conn:
            assert conn.execute("SELECT current_setting('port')::int").fetchone() == (port,)
            proxy.cut()
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(proxy.dsn(ADMIN_DSN), connect_timeout=5)
        proxy.restore()
        with psycopg.connect(proxy.dsn(ADMIN_DSN)) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        proxy.close()


def test_a_proxy_to_another_port_reaches_that_server_only() -> None:
    # Nothing listens on port 1: the proxy must forward there, not to 5432.
    proxy = Proxy(("127.0.0.1", 1))
    try:
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(proxy.dsn(ADMIN_DSN), connect_timeout=5)
    finally:
        proxy.close()
