"""The configuration file pgfleet.yaml: the models (models.py) and their field types
(fields.py), the YAML source (yaml_source.py), the messages a wrong file gets (messages.py)
and loading them together (loading.py).

The models' field defaults are pgfleet's defaults: read them from `QueueConfig()`,
`SupervisorConfig()` or `Config(queues={...})` rather than declaring them again."""

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
    WebConfig,
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
    "WebConfig",
    "config_json_schema",
    "load_config",
    "parse_config_text",
    "parse_listen",
]
