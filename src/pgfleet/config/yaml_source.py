"""The YAML source of the configuration: safe loading, `${VAR}` interpolation, the line of
every key, and the caps that refuse hostile documents.

YAML rules pgfleet applies on top of PyYAML's safe loader:

* Mapping keys are always the text as written: a queue named ``no``, ``on`` or ``off``
  stays that string (YAML 1.1 would turn it into a boolean). Duplicate keys are errors.
* Only plain data: tags such as ``!!python/object/apply`` are refused, nothing is built.
* Integers must be plain decimal. ``010`` (octal 8 in YAML 1.1), ``0x10``, ``0b1`` and
  base-60 ``1:30`` are errors instead of silently becoming other numbers. ``1e3`` is not a
  number in YAML 1.1 (PyYAML needs ``1.0e+3``), so an integer or duration field given it
  reports the usual "expected ..." error. Dates stay strings.
* Size and alias caps (1 MiB, 100 aliases, 100,000 values after alias expansion, 50
  levels of nesting) refuse billion-laughs documents before they use memory.

Interpolation happens after parsing, on string values only, so an injected value stays
one literal string whatever it contains. ``${VAR}`` and ``${VAR:-default}`` (the default
also replaces an empty value) are expanded once, never recursively; ``$${`` writes a
literal ``${``. Numeric fields accept interpolated digits: ``processes: ${N:-2}`` is 2,
and an interpolated ``010`` is decimal 10.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from pgfleet.config.messages import ConfigError, KeyPath, Problem

MAX_FILE_BYTES = 1024 * 1024
MAX_ALIASES = 100
MAX_VALUES = 100_000
MAX_DEPTH = 50


@dataclass(frozen=True)
class Document:
    """The file as plain data, where each key path stood, and what the loader refused."""

    data: Any
    lines: dict[KeyPath, int]
    problems: list[Problem]
    # Values taken from the environment, by variable name: never shown in a problem.
    interpolated: dict[str, str] = field(default_factory=dict)


def read_file(path: str | Path) -> str:
    """The text of the file at `path`; ConfigError if unreadable, too big or not UTF-8."""
    filename = str(path)
    try:
        with open(path, "rb") as handle:
            # Read one byte past the cap so a huge file is refused without reading it all.
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError([f"{filename}: cannot read the file: {exc.strerror}"]) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError([_too_big(filename)])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError([f"{filename}:{line}: the file is not valid UTF-8"]) from None


def read_document(text: str, filename: str, environ: Mapping[str, str]) -> Document:
    """Parse and interpolate `text`; ConfigError if it is not a YAML mapping at all."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise ConfigError([_too_big(filename)])
    root = _compose(text, filename)
    if root is None:
        raise ConfigError(
            [f"{filename}:1: the file is empty; expected a mapping with at least `queues`"]
        )
    if not isinstance(root, MappingNode):
        line = root.start_mark.line + 1
        raise ConfigError(
            [f"{filename}:{line}: expected a mapping at the top level (with at least `queues`)"]
        )
    builder = _Builder(environ)
    try:
        data = builder.build(root, (), 0)
    except _Refused as exc:
        raise ConfigError([f"{filename}:{exc.line}: {exc}"]) from None
    except yaml.MarkedYAMLError as exc:  # e.g. a `<<` merge of something not a mapping
        raise ConfigError([_yaml_problem(filename, exc)]) from None
    return Document(data, dict(builder.lines), list(builder.problems),
                    dict(builder.interpolated))


def _too_big(filename: str) -> str:
    return f"{filename}:1: the file is larger than 1 MiB; refusing to parse it"


class _Refused(Exception):
    """A document refused as a whole (alias bomb, too deep); carries the line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class _Loader(yaml.SafeLoader):
    """SafeLoader that counts aliases and leaves dates as strings."""

    # Dates would make `args` non-JSON; everything date-like stays text.
    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_count = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                raise _Refused(line, f"more than {MAX_ALIASES} aliases; refusing the document")
        return super().compose_node(parent, index)


def _compose(text: str, filename: str) -> Node | None:
    loader = _Loader(text)
    try:
        return loader.get_single_node()
    except _Refused as exc:
        raise ConfigError([f"{filename}:{exc.line}: {exc}"]) from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_yaml_problem(filename, exc)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{filename}:1: {exc}"]) from None
    except RecursionError:
        raise ConfigError([f"{filename}:1: the document is nested too deeply"]) from None
    finally:
        loader.dispose()


def _yaml_problem(filename: str, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{mark.line + 1}:{mark.column + 1}" if mark else "1"
    problem = exc.problem or exc.context or "malformed YAML"
    if "alias" in problem or (exc.context and "alias" in exc.context):
        # The classic trap: `cron: * * * * *` reads as an alias.
        problem += ' (a value starting with `*` must be quoted, e.g. "* * * * *")'
    elif "\\t" in problem or "tab" in problem:
        problem += " (indent with spaces, not tabs)"
    return f"{filename}:{where}: {problem}"


_PLAIN_TAGS = {
    "tag:yaml.org,2002:" + name for name in ("str", "int", "float", "bool", "null", "map", "seq")
}
_MERGE_TAG = "tag:yaml.org,2002:merge"
_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")
_PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9_]*)")
_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")


class _Builder:
    """Turns composed YAML nodes into plain data, recording the line of every key path."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.interpolated: dict[str, str] = {}
        self.lines: dict[KeyPath, int] = {}
        self.problems: list[Problem] = []
        self.values = 0
        self.constructor = yaml.SafeLoader("")

    def problem(self, line: int, path: KeyPath, message: str) -> None:
        self.problems.append((line, path, message))

    def build(self, node: Node, path: KeyPath, depth: int) -> Any:
        self.values += 1
        line = node.start_mark.line + 1
        if self.values > MAX_VALUES:
            raise _Refused(
                line,
                f"the document expands to more than {MAX_VALUES} values "
                "through aliases; refusing it",
            )
        if depth > MAX_DEPTH:
            raise _Refused(
                line, f"nested more than {MAX_DEPTH} levels deep (or an alias refers to itself)"
            )
        self.lines.setdefault(path, line)
        if node.tag not in _PLAIN_TAGS:
            # Refuse rather than construct: a Python tag must never reach a constructor.
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            self.problem(line, path, f"tag `{tag}` is not allowed; only plain data is")
            return None
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        assert isinstance(node, ScalarNode)
        return self._scalar(node, path)

    def _mapping(self, node: MappingNode, path: KeyPath, depth: int) -> dict[str, Any]:
        self._check_duplicates(node, path)
        self.constructor.flatten_mapping(node)  # resolves `<<: *base` merges in place
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                self.problem(key_node.start_mark.line + 1, path, "mapping keys must be text")
                continue
            # The key as written: YAML 1.1 would read a queue named `no` as False.
            key = str(key_node.value)
            child = (*path, key)
            self.lines[child] = key_node.start_mark.line + 1
            result[key] = self.build(value_node, child, depth + 1)
        return result

    def _check_duplicates(self, node: MappingNode, path: KeyPath) -> None:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            line = key_node.start_mark.line + 1
            key = str(key_node.value)
            if key in seen:
                self.problem(
                    line,
                    (*path, key),
                    f"duplicate key `{key}` (first on line {seen[key]}, again on line {line})",
                )
            else:
                seen[key] = line

    def _scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        line = node.start_mark.line + 1
        self.lines[path] = line
        raw = str(node.value)
        if node.style is None and _ambiguous_int(raw, node.tag):
            self.problem(line, path, _int_message(raw, node))
            return raw
        try:
            value = self.constructor.construct_object(node)
        except (ValueError, KeyError, yaml.YAMLError):
            # Only explicit tags get here, e.g. `!!int abc` or `!!bool maybe`.
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            self.problem(line, path, f"`{raw}` is not a valid `{tag}`")
            return raw
        if isinstance(value, str):
            return self._interpolate(value, line, path)
        return value

    def _interpolate(self, text: str, line: int, path: KeyPath) -> str:
        if "${" not in text:
            return text

        def replace(match: re.Match[str]) -> str:
            whole, name, default = match.group(0), match.group(1), match.group(2)
            if whole == "$${":
                return "${"
            if name is None:
                self.problem(
                    line,
                    path,
                    "malformed `${`: expected ${NAME} or "
                    "${NAME:-default}; write $${ for a literal ${",
                )
                return whole
            value = self.environ.get(name)
            if default is not None and not value:
                return default
            if value is None:
                self.problem(
                    line, path, f"environment variable `{name}` is not set and has no default"
                )
                return ""
            self.interpolated[name] = value
            return value

        # re.sub never rescans replaced text, so a value holding ${OTHER} stays literal.
        return _REFERENCE.sub(replace, text)


def _ambiguous_int(raw: str, tag: str) -> bool:
    if _LEADING_ZERO.fullmatch(raw):
        return True
    return tag == "tag:yaml.org,2002:int" and not _PLAIN_INT.fullmatch(raw)


def _int_message(raw: str, node: ScalarNode) -> str:
    advice = "write integers in plain decimal, without leading zeros (quote text)"
    if node.tag != "tag:yaml.org,2002:int":
        return f"`{raw}` has a leading zero, which YAML 1.1 does not read as decimal; {advice}"
    text = raw.lower().lstrip("+-")
    if ":" in text:
        kind = "base 60"
    elif text.startswith("0x"):
        kind = "hexadecimal"
    elif text.startswith("0b"):
        kind = "binary"
    else:
        kind = "octal"
    try:
        value = yaml.SafeLoader("").construct_yaml_int(node)
    except ValueError:
        return f"`{raw}` is not a plain decimal integer; {advice}"
    return f"YAML 1.1 reads `{raw}` as {kind}, i.e. {value}; {advice}"
