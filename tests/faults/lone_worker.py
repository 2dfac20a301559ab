"""One worker outside any supervisor, with a short lease: a host that can freeze without
anyone killing it (`python -m tests.faults.lone_worker DSN LEASE_SECONDS`).

`pgfleet worker` has no lease option; this builds the same Worker with one. On exit it
prints the lease-lost counter, so a test can see that a late completion was counted."""

from __future__ import annotations

import sys

from prometheus_client import REGISTRY

from pgfleet.runtime import logs
from pgfleet.tasks import load_registry
from pgfleet.worker import Worker, build_settings
from tests.faults.helpers import TASKS


def main() -> int:
    logs.setup()
    dsn, lease = sys.argv[1], float(sys.argv[2])
    worker = Worker(build_settings(
        None, "default", dsn=dsn, registry=load_registry(TASKS), poll_interval=0.2,
        lease=lease, heartbeat_interval=lease / 4, notify=False,
    ))
    worker.install_signal_handlers()
    code = worker.run()
    lost = REGISTRY.get_sample_value("pgfleet_jobs_lease_lost_total", {"queue": "default"})
    print(f"lease_lost={lost or 0:.0f}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
