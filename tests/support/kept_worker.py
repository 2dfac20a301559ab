"""A stand-in for a supervised worker, for the keeper's tests: it leads its own process
group, starts its keeper, then a shell whose background child (its "job's" grandchild)
sleeps, and reports to its heartbeat slot as a worker would.

`python -m tests.support.kept_worker LEASE FOLDER MODE`; MODE is `renewing` (holds a job
and renews every 0.1 s), `stale` (holds a job, renewed once at the start) or `idle` (holds
nothing). It writes FOLDER/pids: its keeper's pid, the shell's and the grandchild's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from pgfleet.runtime import keeper, logs
from pgfleet.runtime.beacon import BeaconBoard
from pgfleet.runtime.process_groups import lead_own_group, leads_own_group


def main() -> int:
    logs.setup()
    lease, folder, mode = float(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    board = BeaconBoard(1)
    board.reset_unready(0)
    beacon = board.beacon(0)
    lead_own_group()
    assert leads_own_group()
    kept = keeper.start(beacon, lease)
    shell = subprocess.Popen(["sh", "-c", f"sleep 600 & echo $! > {folder}/grandchild; wait"])
    while not (folder / "grandchild").exists() or not (folder / "grandchild").read_text():
        time.sleep(0.01)
    grandchild = (folder / "grandchild").read_text().strip()
    beacon.beat(0 if mode == "idle" else 1)
    beacon.leases_renewed(time.monotonic())
    (folder / "pids.tmp").write_text(f"{kept} {shell.pid} {grandchild}\n")
    (folder / "pids.tmp").rename(folder / "pids")
    while True:
        time.sleep(0.1)
        beacon.beat(0 if mode == "idle" else 1)
        if mode == "renewing":
            beacon.leases_renewed(time.monotonic())


if __name__ == "__main__":
    sys.exit(main())
