"""Gauges fed later by one process of the host are absent until then, never a false 0
(docs/monitoring.md: `pgfleet_database_up` is absent until the first check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRAPE = """
import sys
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from pgfleet import metrics

def scrape():
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=sys.argv[1])
    return [line for line in generate_latest(registry).decode().splitlines()
            if line.startswith(("pgfleet_database_up", "pgfleet_process_heartbeat_age"))]

print(scrape())
metrics.database_up.set(0)
metrics.process_heartbeat_age.labels("web-1", "worker").set(3.5)
print(scrape())
metrics.database_up.set(1)
print(scrape())
"""


def test_database_up_and_heartbeat_age_are_absent_until_set(tmp_path: Path) -> None:
    folder = tmp_path / "multiproc"
    folder.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", SCRAPE, str(folder)], capture_output=True, text=True,
        timeout=60, check=True, env={"PROMETHEUS_MULTIPROC_DIR": str(folder),
                                     "PYTHONPATH": ":".join(sys.path)},
    )
    before, down, up = result.stdout.splitlines()
    assert before == "[]"
    assert down == str(["pgfleet_database_up 0.0",
                        'pgfleet_process_heartbeat_age_seconds{host="web-1",kind="worker"} 3.5'])
    assert up.startswith("['pgfleet_database_up 1.0'")
