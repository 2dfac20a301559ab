"""The named queries of sql/queries.sql, each with the cardinality its header states.

A block starts with `-- name: NAME :CARDINALITY` and runs to the next header. store.py runs
a query only through the runner of its cardinality, and the runner holds the result to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import cache
from importlib import resources

from pgfleet.errors import PgfleetError

QUERY_FILE = "sql/queries.sql"


class Cardinality(Enum):
    ONE = "one"  # exactly one row
    MAYBE = "maybe"  # zero or one row
    MANY = "many"  # any number of rows
    SCALAR = "scalar"  # exactly one row of exactly one column: its value
    EXEC = "exec"  # no result columns; the row count is what comes back


# Cardinalities whose rows become a row dataclass (by column name).
ROW_CARDINALITIES = (Cardinality.ONE, Cardinality.MAYBE, Cardinality.MANY)


class QueryFileError(PgfleetError):
    """sql/queries.sql is malformed (a packaging or editing mistake)."""


class CardinalityError(PgfleetError):
    """A query returned a number of rows or columns its header rules out."""


@dataclass(frozen=True)
class Query:
    name: str
    cardinality: Cardinality
    sql: bytes
    line: int  # of the header, for messages

    def check_rows(self, rows: int) -> None:
        """Refuse a row count this query's cardinality rules out."""
        allowed = {Cardinality.ONE: rows == 1, Cardinality.SCALAR: rows == 1,
                   Cardinality.MAYBE: rows <= 1}.get(self.cardinality, True)
        if not allowed:
            raise CardinalityError(
                f"query {self.name} (:{self.cardinality.value}, {QUERY_FILE}:{self.line})"
                f" returned {rows} rows")


_HEADER = re.compile(r"^-- name:(.*)$", re.MULTILINE)
_HEADER_BODY = re.compile(r"^ (\w+) :(\w+)\s*$")


def parse(text: str) -> dict[str, Query]:
    """{name: Query} of a query file's text; a malformed header or a repeated name is
    refused with its line."""
    found: dict[str, Query] = {}
    headers = list(_HEADER.finditer(text))
    for index, header in enumerate(headers):
        line = text.count("\n", 0, header.start()) + 1
        where = f"{QUERY_FILE}:{line}"
        match = _HEADER_BODY.match(header[1])
        if match is None:
            raise QueryFileError(f"{where}: expected '-- name: NAME :CARDINALITY',"
                                 f" got {header[0].strip()!r}")
        name, cardinality = match[1], match[2]
        if cardinality not in {c.value for c in Cardinality}:
            known = ", ".join(f":{c.value}" for c in Cardinality)
            raise QueryFileError(f"{where}: query {name} has cardinality :{cardinality};"
                                 f" expected one of {known}")
        if name in found:
            raise QueryFileError(f"{where}: query {name} is defined twice (first at line"
                                 f" {found[name].line})")
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body = text[header.end():end].strip()
        found[name] = Query(name, Cardinality(cardinality), body.encode(), line)
    return found


@cache
def catalogue() -> dict[str, Query]:
    """The package's queries, parsed once per process."""
    return parse((resources.files("pgfleet") / QUERY_FILE).read_text("utf-8"))
