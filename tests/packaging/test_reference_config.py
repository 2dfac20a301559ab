"""config/pgfleet.reference.yaml documents every key of the model with its default."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from pgfleet.config import Config, QueueConfig, ScheduleConfig, parse_config_text

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "config" / "pgfleet.reference.yaml"
# Collections of named entries: the reference shows one entry, whose keys are the model's.
ENTRY_MODELS: dict[str, type[BaseModel]] = {"queues": QueueConfig, "schedules": ScheduleConfig}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _missing_or_extra(raw: dict[str, Any], model: type[BaseModel], path: str) -> list[str]:
    problems = []
    fields = set(model.model_fields)
    for key in sorted(fields - set(raw)):
        problems.append(f"{path}{key}: missing from the reference")
    for key in sorted(set(raw) - fields):
        problems.append(f"{path}{key}: not a key of {model.__name__}")
    for key in sorted(fields & set(raw)):
        annotation = model.model_fields[key].annotation
        if key in ENTRY_MODELS and model is Config:
            assert isinstance(raw[key], dict) and len(raw[key]) == 1, key
            (name, entry), = raw[key].items()
            problems += _missing_or_extra(entry, ENTRY_MODELS[key], f"{path}{key}.{name}.")
            continue
        sub = _model_of(annotation)
        if sub is not None:
            assert isinstance(raw[key], dict), f"{path}{key} should be a mapping"
            problems += _missing_or_extra(raw[key], sub, f"{path}{key}.")
    return problems


def test_reference_lists_every_key_of_the_model() -> None:
    raw = yaml.safe_load(REFERENCE.read_text())
    assert _missing_or_extra(raw, Config, "") == []


def test_reference_values_are_the_defaults() -> None:
    config = parse_config_text(REFERENCE.read_text(), str(REFERENCE), environ={})
    defaults = Config(queues={"default": QueueConfig()})
    for name in Config.model_fields:
        if name not in ("queues", "schedules"):
            assert getattr(config, name) == getattr(defaults, name), name
    assert config.queues == {"default": QueueConfig()}
    (schedule,) = config.schedules.values()
    for name, field in ScheduleConfig.model_fields.items():
        if not field.is_required():
            assert getattr(schedule, name) == field.get_default(call_default_factory=True), name


def test_every_key_is_commented() -> None:
    lines = REFERENCE.read_text().splitlines()
    key = re.compile(r"^\s*[A-Za-z_][\w-]*:")
    for number, line in enumerate(lines):
        if not key.match(line):
            continue
        above = lines[number - 1].strip() if number else ""
        assert "#" in line or above.startswith("#"), f"line {number + 1} has no comment"
