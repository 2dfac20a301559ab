"""Loading a configuration: the YAML source, then the models, every problem reported at once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from pgfleet.config.messages import (
    ConfigError,
    format_problem,
    validation_problems,
    without_values,
)
from pgfleet.config.models import Config
from pgfleet.config.yaml_source import read_document, read_file


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate the file at `path`; raise ConfigError on any problem."""
    return parse_config_text(read_file(path), str(path), environ)


def parse_config_text(
    text: str, filename: str = "<config>", environ: Mapping[str, str] | None = None
) -> Config:
    """Validate configuration `text` as if read from `filename`; raise ConfigError."""
    document = read_document(text, filename, os.environ if environ is None else environ)
    problems = list(document.problems)
    config: Config | None = None
    try:
        config = Config.model_validate(document.data)
    except ValidationError as exc:
        explained = [path for _, path, _ in document.problems]
        problems.extend(validation_problems(exc, Config, document.lines, explained))
    if problems:
        problems.sort(key=lambda problem: problem[0])
        raise ConfigError([
            format_problem(filename, line, path, without_values(message, document.interpolated))
            for line, path, message in problems
        ])
    assert config is not None
    config._source = filename
    config._lines = document.lines
    config._interpolated = document.interpolated
    return config
