"""A DSN's password never reaches a log line, an error or a process title, whatever it holds."""

from __future__ import annotations

import pytest

from pgfleet.sql.db import redact_dsn, scrub


@pytest.mark.parametrize(
    ("dsn", "redacted"),
    [
        ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
        ("postgres://u:p@ss@h:5432/db", "postgres://u:***@h:5432/db"),
        ("postgresql://u:p@s@s@h1,h2/db", "postgresql://u:***@h1,h2/db"),
        ("postgresql://u:p:ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p/ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p?ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p%40ss@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:p ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://:pw@h/db", "postgresql://:***@h/db"),
        ("POSTGRESQL://U:PW@H/DB", "POSTGRESQL://U:***@H/DB"),
        (
            "postgresql://u@h/db?password=pw&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        (
            "postgresql://u@h/db?sslmode=require&password=p@ss#x",
            "postgresql://u@h/db?sslmode=require&password=***",
        ),
        # The user part's password runs into a query password: both hidden, nothing left over.
        ("postgresql://u:a?password=b@h/db", "postgresql://u:***"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://h:5432/db", "postgresql://h:5432/db"),
        ("host=h password=pw dbname=x", "host=h password=*** dbname=x"),
        ("host=h password = 'p w\\'x' dbname=x", "host=h password = *** dbname=x"),
        ("host=h password='p@s:s/x' dbname=x", "host=h password=*** dbname=x"),
        ("host=h password=p@s:s/x dbname=x", "host=h password=*** dbname=x"),
        ("host=h password=p&ss dbname=x", "host=h password=*** dbname=x"),
        ("host=h password=p'ss dbname=x", "host=h password=*** dbname=x"),
        ("host=h password=p\\ ss dbname=x", "host=h password=*** dbname=x"),
        ("host=h password='unterminated dbname=x", "host=h password=***"),
        ("host=h user=u dbname=x", "host=h user=u dbname=x"),
    ],
)
def test_redact_dsn(dsn: str, redacted: str) -> None:
    assert redact_dsn(dsn) == redacted


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://u:p@ss@h/db", "p@ss"),
        ("postgresql://u:p%40ss@h/db", "p@ss"),
        ("postgresql://u@h/db?password=p%26ss", "p&ss"),
        ("host=h password='p w\\'x'", "p w'x"),
        ("host=h password=p\\ ss", "p ss"),
        ("host=h password=p&ss dbname=x", "p&ss"),
    ],
)
def test_scrub_removes_the_password_as_the_server_saw_it(dsn: str, secret: str) -> None:
    message = f'FATAL:  password authentication failed ("{secret}")'
    assert scrub(message, dsn) == 'FATAL:  password authentication failed ("***")'


def test_scrub_without_a_dsn_changes_nothing() -> None:
    assert scrub("FATAL: no", None) == "FATAL: no"
    assert scrub("FATAL: no", "host=h") == "FATAL: no"
