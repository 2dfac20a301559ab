"""sql/queries.sql against store.py and a migrated database: names unique, every name used
and every used name defined, each query run by the runner of its cardinality, and the
columns of each query named exactly as the fields of its row type."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from pgfleet.sql import fleet as fleet_store, store
from pgfleet.sql.queries import (
    Cardinality,
    CardinalityError,
    Query,
    QueryFileError,
    catalogue,
    parse,
)

SRC = Path(store.__file__).resolve().parents[1]
RUNNERS = {"_one": Cardinality.ONE, "_maybe": Cardinality.MAYBE, "_many": Cardinality.MANY,
           "_send_many": Cardinality.MANY, "_scalar": Cardinality.SCALAR,
           "_send_scalar": Cardinality.SCALAR,
           "_exec": Cardinality.EXEC}


@dataclasses.dataclass(frozen=True)
class Use:
    name: str
    runner: Cardinality
    row: str | None  # the row type's name, for the row runners
    where: str


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


# The store's modules: jobs (store.py, with the runners), the fleet's own rows, rescues.
STORE_FILES = ("sql/store.py", "sql/fleet.py", "sql/rescue.py")


def uses() -> list[Use]:
    """Every run of a named query, read from the store's source (the only modules that run
    them: test_only_store_runs_queries)."""
    return [use for name in STORE_FILES for use in _uses_in(name)]


def _uses_in(filename: str) -> list[Use]:
    found = []
    for node in ast.walk(ast.parse((SRC / filename).read_text("utf-8"))):
        if not isinstance(node, ast.Call) or _callee(node) not in RUNNERS:
            continue
        where = f"{filename}:{node.lineno}"
        name = node.args[1] if len(node.args) > 1 else None
        assert isinstance(name, ast.Constant) and isinstance(name.value, str), \
            f"{where}: a query runner needs the query's name as a literal"
        runner = RUNNERS[_callee(node) or ""]
        row = None
        if runner in (Cardinality.ONE, Cardinality.MAYBE, Cardinality.MANY):
            assert len(node.args) == 4 and isinstance(node.args[3], ast.Name), \
                f"{where}: a row runner needs its row type by name"
            row = node.args[3].id
        found.append(Use(name.value, runner, row, where))
    return found


def _reaches_the_query_file(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        names = {alias.name for alias in node.names}
        return node.module == "pgfleet.sql.queries" or (
            node.module == "pgfleet.sql.store" and bool(names & {"q", "queries"}))
    return (isinstance(node, ast.Attribute) and node.attr in ("q", "queries")
            and isinstance(node.value, ast.Name) and node.value.id == "store")


def test_only_store_runs_queries() -> None:
    """Other modules call the store's functions; so the store's runs are all of src/'s."""
    others = [f"{path.relative_to(SRC)}:{node.lineno}"
              for path in sorted(SRC.rglob("*.py"))
              if str(path.relative_to(SRC)) not in (*STORE_FILES, "sql/queries.py")
              for node in ast.walk(ast.parse(path.read_text("utf-8")))
              if _reaches_the_query_file(node)]
    assert others == []


def test_every_query_is_used_and_every_use_is_defined() -> None:
    defined = set(catalogue())
    used = {use.name for use in uses()}
    assert used - defined == set(), "run by src/ but not in queries.sql"
    assert defined - used == set(), "in queries.sql but run by nothing in src/"


def test_each_query_is_run_by_the_runner_of_its_cardinality() -> None:
    wrong = [(u.where, u.name, u.runner.value, catalogue()[u.name].cardinality.value)
             for u in uses() if catalogue()[u.name].cardinality is not u.runner]
    assert wrong == []


def test_each_row_query_has_one_row_type() -> None:
    types: dict[str, set[str]] = {}
    for use in uses():
        if use.row is not None:
            types.setdefault(use.name, set()).add(use.row)
    assert {name: rows for name, rows in types.items() if len(rows) > 1} == {}


def _numbered(sql: bytes) -> bytes:
    """psycopg's %(name)s / %(name)b placeholders as PostgreSQL's $1, $2, ..."""
    numbers: dict[bytes, int] = {}

    def number(match: re.Match[bytes]) -> bytes:
        return b"$%d" % numbers.setdefault(match[1], len(numbers) + 1)

    return re.sub(rb"%\((\w+)\)[sb]", number, sql)


def columns(conn: psycopg.Connection[Any], query: Query) -> list[str]:
    """The names of the columns `query` returns, as the server describes it (PREPARE)."""
    pgconn = conn.pgconn
    prepared = pgconn.prepare(b"", _numbered(query.sql))
    assert prepared.status == pq.ExecStatus.COMMAND_OK, \
        f"{query.name}: {prepared.error_message.decode()}"
    described = pgconn.describe_prepared(b"")
    assert described.status == pq.ExecStatus.COMMAND_OK, described.error_message.decode()
    return [(described.fname(i) or b"").decode() for i in range(described.nfields)]


def test_returned_columns_match_the_row_types(conn: psycopg.Connection[Any]) -> None:
    rows = {use.name: use.row for use in uses() if use.row is not None}
    mismatched = {}
    for name, query in catalogue().items():
        names = columns(conn, query)
        assert len(names) == len(set(names)), f"{name}: a column name repeats: {names}"
        if query.cardinality is Cardinality.EXEC:
            expected: list[str] | None = []
        elif query.cardinality is Cardinality.SCALAR:
            expected = names if len(names) == 1 else None
        else:
            expected = [f.name for f in dataclasses.fields(getattr(store, rows[name]))]
        if expected is None or sorted(names) != sorted(expected):
            mismatched[name] = (names, expected)
    assert mismatched == {}


def test_the_checker_sees_a_renamed_column(conn: psycopg.Connection[Any]) -> None:
    claim = catalogue()["claim"]
    renamed = dataclasses.replace(claim, sql=claim.sql.replace(b"AS wait_seconds", b"AS wait"))
    assert "wait" in columns(conn, renamed)
    assert "wait_seconds" not in columns(conn, renamed)


@pytest.mark.parametrize(("text", "message"), [
    ("-- name: a :many\nSELECT 1 AS x\n-- name: a :one\nSELECT 2 AS x\n",
     "sql/queries.sql:3: query a is defined twice (first at line 1)"),
    ("-- name: a\nSELECT 1\n",
     "sql/queries.sql:1: expected '-- name: NAME :CARDINALITY', got '-- name: a'"),
    ("\n-- name: a :lots\nSELECT 1\n",
     "sql/queries.sql:2: query a has cardinality :lots; expected one of"
     " :one, :maybe, :many, :scalar, :exec"),
])
def test_a_malformed_query_file_is_refused_with_its_line(text: str, message: str) -> None:
    with pytest.raises(QueryFileError) as refused:
        parse(text)
    assert str(refused.value) == message


def test_parse_keeps_each_body_and_cardinality() -> None:
    parsed = parse("-- top comment\n\n-- name: a :maybe\n-- why\nSELECT 1 AS x\n\n"
                   "-- name: b :exec\nDELETE FROM t\n")
    assert {n: (q.cardinality, q.sql, q.line) for n, q in parsed.items()} == {
        "a": (Cardinality.MAYBE, b"-- why\nSELECT 1 AS x", 3),
        "b": (Cardinality.EXEC, b"DELETE FROM t", 7),
    }


@pytest.mark.parametrize(("cardinality", "rows", "refused"), [
    (Cardinality.ONE, 0, True), (Cardinality.ONE, 1, False), (Cardinality.ONE, 2, True),
    (Cardinality.MAYBE, 0, False), (Cardinality.MAYBE, 1, False), (Cardinality.MAYBE, 2, True),
    (Cardinality.SCALAR, 0, True), (Cardinality.SCALAR, 2, True),
    (Cardinality.MANY, 0, False), (Cardinality.MANY, 5, False),
])
def test_a_row_count_the_cardinality_rules_out_is_refused(
    cardinality: Cardinality, rows: int, refused: bool
) -> None:
    query = Query("q", cardinality, b"SELECT 1", 7)
    if refused:
        with pytest.raises(CardinalityError, match=rf"^query q \(:{cardinality.value},"
                           rf" sql/queries.sql:7\) returned {rows} rows$"):
            query.check_rows(rows)
    else:
        query.check_rows(rows)


def test_a_one_query_that_finds_nothing_is_an_error(conn: psycopg.Connection[Any]) -> None:
    # schedule_run_enqueue is :one: its run row must exist (schedule_run_insert made it).
    with pytest.raises(CardinalityError, match=r"schedule_run_enqueue .* returned 0 rows"):
        fleet_store.enqueue_schedule_run(
            conn, schedule="never-inserted", fire_time=fleet_store.db_now(conn), task="noop",
            args_json="{}", queue="default", priority=0, max_attempts=1)


@pytest.mark.parametrize("select", ["SELECT 7 AS job_id, true AS created",
                                    "SELECT true AS created, 7 AS job_id"])
def test_rows_are_filled_by_column_name_in_any_order(conn: psycopg.Connection[Any],
                                                     select: str) -> None:
    """store.by_name fills fields positionally only when the columns come in their order."""
    with conn.cursor(row_factory=store.by_name(store.Enqueued)) as cur:
        assert cur.execute(select).fetchall() == [store.Enqueued(job_id=7, created=True)]
