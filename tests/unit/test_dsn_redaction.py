"""A DSN's password never reaches a log line, an error or a process title, whatever it holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pgfleet.errors import DatabaseUnavailable
from pgfleet.sql.db import connect, first_line, redact_dsn, scrub


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
        # libpq ends an unquoted value at a space or an "&"; what follows, up to the next
        # parameter it knows, is still the password as it was meant.
        ("host=h password=p ss dbname=x", "host=h password=*** dbname=x"),
        ("host=h password=p ss=y port=1", "host=h password=*** port=1"),
        ("host=h sslpassword=p ss port=1", "host=h sslpassword=*** port=1"),
        (
            "postgresql://u@h/db?password=p&ss&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
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


# Passwords made of two pieces that appear nowhere else, joined by what libpq cuts a
# password at; port 1 refuses anything that gets as far as connecting.
PIECES = ("Qx7", "Zk9")
HOSTILE = [
    "postgresql://postgres:Qx7@Zk9@127.0.0.1:1/x",
    "postgresql://postgres:Qx7/Zk9@127.0.0.1:1/x",
    "postgresql://postgres:Qx7 Zk9@127.0.0.1:1/x",
    "postgresql://postgres:Qx7%zzZk9@127.0.0.1:1/x",
    "postgresql://postgres@127.0.0.1:1/x?password=Qx7&Zk9",
    "postgresql://postgres@127.0.0.1:1/x?password=Qx7&Zk9=1",
    "host=127.0.0.1 port=1 user=postgres password=Qx7 Zk9 dbname=x",
    "host=127.0.0.1 port=1 user=postgres password=Qx7 Zk9=y dbname=x",
    "host=127.0.0.1 port=1 user=postgres password='Qx7 Zk9 dbname=x",
    "host=127.0.0.1 port=1 user=postgres password='Qx7\\' Zk9' dbname=x",
    "host=127.0.0.1 port=1 user=postgres password=Qx7\\ Zk9 dbname=x",
]


def shows_a_piece(text: str) -> bool:
    return any(piece in text for piece in PIECES)


@pytest.mark.parametrize("dsn", HOSTILE)
def test_no_piece_of_the_password_in_the_redacted_dsn_or_the_driver_error(dsn: str) -> None:
    assert not shows_a_piece(redact_dsn(dsn)), redact_dsn(dsn)
    with pytest.raises((DatabaseUnavailable, psycopg.Error)) as caught:
        connect(dsn, connect_timeout=2).close()
    raw = str(caught.value)
    message = raw if isinstance(caught.value, DatabaseUnavailable) \
        else first_line(caught.value, dsn)
    assert not shows_a_piece(message), (message, raw)


@pytest.mark.parametrize("dsn", HOSTILE)
def test_no_piece_of_the_password_in_a_command_error(dsn: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pgfleet", "status"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PGFLEET_DATABASE_URL": dsn})
    assert done.returncode != 0
    assert done.stderr.startswith("pgfleet: error: ")
    assert not shows_a_piece(done.stdout + done.stderr), done.stderr


def test_a_short_password_is_not_spelled_out_by_hiding_it_in_words() -> None:
    dsn = "host=h password=p ss=y"
    assert scrub('invalid connection option "ss"', dsn) == 'invalid connection option "***"'


def test_no_piece_of_the_password_when_pgfleet_dev_migrates_a_configured_database(
        tmp_path: Path) -> None:
    config = tmp_path / "pgfleet.yaml"
    config.write_text(f'database_url: "{HOSTILE[0]}"\nqueues: {{default: {{}}}}\n')
    done = subprocess.run([sys.executable, "-m", "pgfleet", "dev", "-c", str(config)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if "DATABASE_URL" not in k})
    assert done.returncode != 0
    assert "pgfleet: error: " in done.stderr
    assert not shows_a_piece(done.stdout + done.stderr), done.stderr
