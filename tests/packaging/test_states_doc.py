"""docs/states.md against the schema and the SQL: every state of the schema is in the
diagram, the table and the diagram show the same transitions, and every statement that
writes a job's state is cited in the table: the named queries of sql/queries.sql (and
sql/web.sql), the SQL functions, and the triggers that rewrite a state.

The SQL is read from the files, not from a database, so the check runs anywhere. A
function's body is its last definition: sql/functions/NAME.sql when that file exists,
otherwise the last `CREATE [OR REPLACE] FUNCTION` of it (per signature) in the migrations.
The schema (the state enum or CHECK, the triggers) is read from sql/schema.sql when it
exists, otherwise from the migrations in order."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from pgfleet.sql.queries import catalogue

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "states.md"
SQL = ROOT / "src" / "pgfleet" / "sql"
START = "[*]"  # no row: before its insert, after its delete


# ---- reading the SQL ------------------------------------------------------------------

def _code(sql: str) -> str:
    """`sql` without its -- comments (a '--' inside a string literal would be cut too;
    none of pgfleet's statements has one)."""
    return re.sub(r"--[^\n]*", "", sql)


def _migrations() -> list[Path]:
    return sorted((SQL / "migrations").glob("*.sql"))


def _schema_files() -> list[Path]:
    """The files that define tables, types and triggers, in the order they apply."""
    schema = SQL / "schema.sql"
    return [schema] if schema.exists() else _migrations()


def _split_top_level(text: str) -> list[str]:
    parts, depth, quoted, current = [], 0, False, ""
    for char in text:
        if char == "'":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        elif not quoted and depth == 0 and char == ",":
            parts.append(current)
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current)
    return parts


_TYPE_ALIASES = {"int": "integer", "int4": "integer", "int8": "bigint", "bool": "boolean",
                 "double precision": "float8", "float": "float8"}


def _type(words: str) -> str:
    words = " ".join(words.lower().split())
    base, brackets = re.match(r"(.*?)((?:\[\])*)$", words).groups()  # type: ignore[union-attr]
    return _TYPE_ALIASES.get(base, base) + brackets


def _signature(params: str, *, named: bool) -> tuple[str, ...]:
    """The input argument types of a parameter list (OUT parameters left out)."""
    types = []
    for param in _split_top_level(params):
        param = re.split(r"\s+DEFAULT\s+|\s*=\s*", param.strip(), maxsplit=1,
                         flags=re.I)[0]
        words = param.split()
        if not words:
            continue
        mode = words[0].upper()
        if mode == "OUT":
            continue
        if mode in ("IN", "INOUT", "VARIADIC"):
            words = words[1:]
        types.append(_type(" ".join(words[1:] if named and len(words) > 1 else words)))
    return tuple(types)


def _closing_paren(text: str, opening: int) -> int:
    depth = 0
    for index in range(opening, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    raise ValueError("unbalanced parentheses")


_CREATE_FUNCTION = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+pgfleet\.(\w+)\s*\(", re.I)
_DROP_FUNCTION = re.compile(
    r"\bDROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?pgfleet\.(\w+)\s*\(([^)]*)\)", re.I)
_BODY_START = re.compile(r"\bAS\s+(\$\w*\$)", re.I)

Signature = tuple[str, tuple[str, ...]]


def _apply_functions(text: str, into: dict[Signature, str]) -> None:
    """Add (or replace) the functions `text` defines and remove those it drops, in the
    order the statements come."""
    text = _code(text)
    events = [(m.start(), "create", m) for m in _CREATE_FUNCTION.finditer(text)]
    events += [(m.start(), "drop", m) for m in _DROP_FUNCTION.finditer(text)]
    for _, kind, match in sorted(events, key=lambda event: event[0]):
        name = match[1]
        if kind == "drop":
            into.pop((name, _signature(match[2], named=False)), None)
            continue
        closing = _closing_paren(text, match.end() - 1)
        signature = _signature(text[match.end():closing], named=True)
        tag = _BODY_START.search(text, closing)
        assert tag is not None, f"pgfleet.{name}: no $$ body"
        end = text.index(tag[1], tag.end())
        into[(name, signature)] = text[tag.end():end]


def function_bodies() -> dict[Signature, str]:
    """The body of every pgfleet function as it stands after the last migration: one per
    (name, input types). sql/functions/NAME.sql, where it exists, replaces every earlier
    definition of NAME."""
    bodies: dict[Signature, str] = {}
    for path in _migrations():
        _apply_functions(path.read_text(), bodies)
    for path in sorted((SQL / "functions").glob("*.sql")):
        moved: dict[Signature, str] = {}
        _apply_functions(path.read_text(), moved)
        for name in {name for name, _ in moved}:
            for key in [key for key in bodies if key[0] == name]:
                del bodies[key]
        bodies.update(moved)
    return bodies


def job_states() -> list[str]:
    """The values a job's state may take: the enum pgfleet.job_state (with any ALTER TYPE
    ... ADD VALUE), or the CHECK (state IN (...)) of a text column."""
    text = "\n".join(_code(path.read_text()) for path in _schema_files())
    states: list[str] = []
    enum = re.search(r"CREATE\s+TYPE\s+pgfleet\.job_state\s+AS\s+ENUM\s*\(([^)]*)\)", text, re.I)
    if enum:
        states += re.findall(r"'([^']*)'", enum[1])
        states += re.findall(r"ALTER\s+TYPE\s+pgfleet\.job_state\s+ADD\s+VALUE\s+"
                             r"(?:IF\s+NOT\s+EXISTS\s+)?'([^']*)'", text, re.I)
    check = re.search(r"CHECK\s*\(\s*state\s+IN\s*\(([^)]*)\)", text, re.I)
    if check:
        states += [s for s in re.findall(r"'([^']*)'", check[1]) if s not in states]
    return states


@dataclass(frozen=True)
class Trigger:
    name: str
    events: str  # e.g. "BEFORE UPDATE OF state"
    when: str
    function: str


_CREATE_TRIGGER = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER\s+(\w+)\s+((?:BEFORE|AFTER|INSTEAD\s+OF)\s+.*?)"
    r"\s+ON\s+pgfleet\.(\w+)\b(.*?)EXECUTE\s+(?:FUNCTION|PROCEDURE)\s+pgfleet\.(\w+)",
    re.I | re.S)
_DROP_TRIGGER = re.compile(r"\bDROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(\w+)\s+ON\s+pgfleet\.(\w+)",
                           re.I)


def job_triggers() -> dict[str, Trigger]:
    """The triggers on pgfleet.jobs after the last migration (or in schema.sql and the
    function files), by name."""
    found: dict[str, Trigger] = {}
    texts = [path.read_text() for path in _schema_files()]
    texts += [path.read_text() for path in sorted((SQL / "functions").glob("*.sql"))]
    for text in map(_code, texts):
        events = [(m.start(), m) for m in _CREATE_TRIGGER.finditer(text)]
        events += [(m.start(), m) for m in _DROP_TRIGGER.finditer(text)]
        for _, match in sorted(events, key=lambda event: event[0]):
            if match.re is _DROP_TRIGGER:
                if match[2] == "jobs":
                    found.pop(match[1], None)
            elif match[3] == "jobs":
                found[match[1]] = Trigger(match[1], " ".join(match[2].split()), match[4],
                                          match[5])
    return found


_UPDATES_JOBS = re.compile(r"\bUPDATE\s+pgfleet\.jobs\b", re.I)
_SETS_STATE = re.compile(r"\bSET\s+\(?\s*state\b|,\s*state\s*=", re.I)
_INSERTS_JOBS = re.compile(r"\bINSERT\s+INTO\s+pgfleet\.jobs\b", re.I)
_ASSIGNS_NEW_STATE = re.compile(r"\bNEW\.state\s*:=", re.I)
_CALLS = re.compile(r"\bpgfleet\.(\w+)\s*\(", re.I)


def writes_state_itself(sql: str) -> bool:
    """Does this SQL write pgfleet.jobs.state: an UPDATE of jobs whose SET names state,
    an INSERT into jobs (a new row gets its first state), or a trigger's NEW.state := ?"""
    code = _code(sql)
    return bool((_UPDATES_JOBS.search(code) and _SETS_STATE.search(code))
                or _INSERTS_JOBS.search(code) or _ASSIGNS_NEW_STATE.search(code))


def state_writing_functions(bodies: dict[Signature, str]) -> set[str]:
    """The functions that write a state themselves or through a function they call."""
    writers = {name for (name, _), body in bodies.items() if writes_state_itself(body)}
    calls = {name: set() for name, _ in bodies}
    for (name, _), body in bodies.items():
        calls[name] |= set(_CALLS.findall(_code(body)))
    while True:
        more = {name for name, called in calls.items() if called & writers} - writers
        if not more:
            return writers
        writers |= more


def writes_state(sql: str, functions: set[str]) -> bool:
    return writes_state_itself(sql) or bool(set(_CALLS.findall(_code(sql))) & functions)


def web_queries() -> dict[str, str]:
    """The named queries of sql/web.sql (headers without a cardinality)."""
    text = (SQL / "web.sql").read_text()
    parts = re.split(r"^-- name: (\w+)[^\n]*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


# ---- reading the page -----------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    cause: str
    cited: frozenset[str]  # identifiers in backticks in the SQL column, pgfleet. dropped


def _states_in(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"\[\*\]|\w+", cell.replace("`", "")))


def diagram_edges(page: str) -> set[tuple[str, str]]:
    """The transitions of the page's stateDiagram-v2 block."""
    blocks = [b for b in re.findall(r"```mermaid\n(.*?)```", page, re.S) if "stateDiagram-v2" in b]
    assert len(blocks) == 1, "states.md needs one ```mermaid stateDiagram-v2 block"
    edges = set()
    for line in blocks[0].splitlines():
        match = re.match(r"\s*(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)", line)
        if match:
            edges.add((match[1], match[2]))
    return edges


def table_rows(page: str) -> list[Row]:
    """The rows of the page's transition table: the table whose header starts
    | from | to | cause | SQL |."""
    lines = page.splitlines()
    header = next((i for i, line in enumerate(lines)
                   if re.match(r"\|\s*from\s*\|\s*to\s*\|\s*cause\s*\|\s*SQL\s*\|", line, re.I)),
                  None)
    assert header is not None, "states.md needs a table headed | from | to | cause | SQL |"
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"a row of the table needs four cells: {line}"
        cited = set()
        for quoted in re.findall(r"`([^`]+)`", cells[3]):
            cited |= {name.removeprefix("pgfleet.") for name in re.findall(r"[\w.]+", quoted)}
        rows.append(Row(_states_in(cells[0]), _states_in(cells[1]), cells[2],
                        frozenset(cited)))
    return rows


def cited(page: str) -> set[str]:
    return set().union(*(row.cited for row in table_rows(page)))


# ---- the checks (each returns what is wrong; tests below feed them broken pages) ---------

def missing_states(page: str) -> list[str]:
    drawn = {state for edge in diagram_edges(page) for state in edge}
    return [state for state in job_states() if state not in drawn]


def invented_states(page: str) -> list[str]:
    known = {*job_states(), START}
    drawn = {state for edge in diagram_edges(page) for state in edge}
    tabled = {s for row in table_rows(page) for s in (*row.sources, *row.targets)}
    return sorted((drawn | tabled) - known)


def edges_apart(page: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(transitions only in the table, transitions only in the diagram)."""
    tabled = {(a, b) for row in table_rows(page) for a in row.sources for b in row.targets}
    drawn = diagram_edges(page)
    return tabled - drawn, drawn - tabled


def uncited_queries(page: str) -> list[str]:
    functions = state_writing_functions(function_bodies())
    queries = {name: query.sql.decode() for name, query in catalogue().items()}
    queries |= {f"web.sql:{name}": sql for name, sql in web_queries().items()}
    names = cited(page)
    return sorted(name for name, sql in queries.items()
                  if writes_state(sql, functions) and name.removeprefix("web.sql:") not in names)


def uncited_functions(page: str) -> list[str]:
    functions = state_writing_functions(function_bodies())
    triggered = {trigger.function for trigger in job_triggers().values()}
    # A trigger's function is cited by its trigger's name (uncited_triggers).
    return sorted(f"pgfleet.{name}" for name in functions - triggered - cited(page))


def uncited_triggers(page: str) -> list[str]:
    """Triggers that rewrite NEW.state must be in the table; every other trigger on a
    job's state (fired by UPDATE OF state, or reading state) must be named on the page."""
    bodies = function_bodies()
    problems = []
    for trigger in job_triggers().values():
        body = "\n".join(b for (name, _), b in bodies.items() if name == trigger.function)
        rewrites = bool(_ASSIGNS_NEW_STATE.search(body))
        on_state = (rewrites or re.search(r"\bOF\b.*\bstate\b", trigger.events, re.I)
                    or re.search(r"\bstate\b", trigger.when + body, re.I))
        if rewrites and trigger.name not in cited(page):
            problems.append(f"{trigger.name} rewrites a state: cite it in the table")
        elif on_state and f"`{trigger.name}`" not in page:
            problems.append(f"{trigger.name} fires on a job's state: name it on the page")
    return problems


def unknown_citations(page: str) -> list[str]:
    bodies = function_bodies()
    known = {*catalogue(), *web_queries(), *(name for name, _ in bodies), *job_triggers()}
    return sorted(cited(page) - known)


# ---- the tests -------------------------------------------------------------------------

PAGE = DOC.read_text()


def test_the_sql_is_read() -> None:
    """The readers find what is known to be there, so an empty reading cannot pass."""
    assert {"queued", "running", "succeeded", "dead", "cancelled"} <= set(job_states())
    functions = state_writing_functions(function_bodies())
    assert {"claim_jobs", "complete_and_claim_jobs", "enqueue_job", "cancel_jobs"} <= functions
    assert "failed_attempt" not in functions  # it computes the state; its callers write it
    assert {"jobs_cancel_requested", "jobs_end_notify", "jobs_notify"} <= set(job_triggers())
    assert len(table_rows(PAGE)) >= 10 and len(diagram_edges(PAGE)) >= 10


def test_every_state_of_the_schema_is_in_the_diagram() -> None:
    assert missing_states(PAGE) == []


def test_the_page_names_no_state_the_schema_lacks() -> None:
    assert invented_states(PAGE) == []


def test_the_table_and_the_diagram_show_the_same_transitions() -> None:
    assert edges_apart(PAGE) == (set(), set())


def test_every_query_that_writes_a_state_is_in_the_table() -> None:
    assert uncited_queries(PAGE) == []


def test_every_function_that_writes_a_state_is_in_the_table() -> None:
    assert uncited_functions(PAGE) == []


def test_every_trigger_on_a_state_is_named() -> None:
    assert uncited_triggers(PAGE) == []


def test_the_table_cites_only_what_exists() -> None:
    assert unknown_citations(PAGE) == []


def _without_rows_citing(page: str, name: str) -> str:
    return "\n".join(line for line in page.splitlines()
                     if not (line.startswith("|") and f"`{name}`" in line))


@pytest.mark.parametrize("query", ["complete_snoozed", "rescue_stale", "retry_job", "withdraw"])
def test_a_query_left_out_of_the_table_is_caught(query: str) -> None:
    assert query in uncited_queries(_without_rows_citing(PAGE, query))


def test_a_state_left_out_of_the_diagram_is_caught() -> None:
    page = "\n".join(line for line in PAGE.splitlines()
                     if not re.match(r"\s*\w+\s*-->\s*cancelled\b|\s*cancelled\s*-->", line))
    assert "cancelled" in missing_states(page)


def test_a_rewriting_trigger_left_out_is_caught() -> None:
    page = _without_rows_citing(PAGE, "jobs_cancel_requested")
    assert any(p.startswith("jobs_cancel_requested") for p in uncited_triggers(page))


def test_a_state_write_is_recognised_however_it_is_written() -> None:
    functions = {"enqueue_job"}
    assert writes_state("UPDATE pgfleet.jobs SET state = 'dead' WHERE id = 1", functions)
    assert writes_state("UPDATE pgfleet.jobs j\n   SET (state, run_at) = (SELECT 1, 2)", functions)
    assert writes_state("UPDATE pgfleet.jobs SET run_at = now(),\n  state = 'queued'", functions)
    assert writes_state("SELECT * FROM pgfleet.enqueue_job('t')", functions)
    assert writes_state("BEGIN NEW.state := 'cancelled'; END", functions)
    assert not writes_state("UPDATE pgfleet.jobs SET progress = '{}' WHERE state = 'running'",
                            functions)
    assert not writes_state("-- SET state = 'dead'\nSELECT 1 FROM pgfleet.jobs", functions)


def test_the_last_definition_of_a_function_counts(tmp_path: Path) -> None:
    bodies: dict[Signature, str] = {}
    _apply_functions("CREATE FUNCTION pgfleet.f(a integer, OUT b text) AS $$ one $$;\n"
                     "CREATE FUNCTION pgfleet.f(a text) AS $$ other $$;\n"
                     "CREATE OR REPLACE FUNCTION pgfleet.f(x int) AS $$ two $$;\n"
                     "DROP FUNCTION pgfleet.f(text);", bodies)
    assert bodies == {("f", ("integer",)): " two "}
