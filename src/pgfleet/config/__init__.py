"""The configuration file pgfleet.yaml: models (models.py), the YAML source (yaml_source.py),
the messages a wrong file gets (messages.py) and loading them together (loading.py)."""

from pgfleet.config.fields import parse_listen
from pgfleet.config.loading import load_config, parse_config_text
from pgfleet.config.messages import ConfigError
from pgfleet.config.models import (
    BackoffConfig,
    Config,
    MaintenanceConfig,
    MetricsConfig,
    QueueConfig,
    RestartBackoffConfig,
    ScheduleConfig,
    SupervisorConfig,
    config_json_schema,
)

__all__ = [
    "BackoffConfig",
    "Config",
    "ConfigError",
    "MaintenanceConfig",
    "MetricsConfig",
    "QueueConfig",
    "RestartBackoffConfig",
    "ScheduleConfig",
    "SupervisorConfig",
    "config_json_schema",
    "load_config",
    "parse_config_text",
    "parse_listen",
]
