"""The series names pgfleet exports, read from pgfleet.metrics (the one declaration)."""

from __future__ import annotations

from prometheus_client import Counter
from prometheus_client.metrics import MetricWrapperBase

from pgfleet import metrics


def exported() -> set[str]:
    names = set()
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            name = value._name
            names.add(f"{name}_total" if isinstance(value, Counter) else name)
        elif isinstance(value, metrics.DatabaseGauge):
            names.add(value.name)
    return names


KNOWN_METRICS = exported()
