"""`make quickstart`: the README's quick start in one terminal.

Starts `pgfleet dev -c examples/pgfleet.yaml` (an embedded PostgreSQL unless a database
URL is configured), enqueues a burst with examples/burst.py and watches it finish, shows
the dead job and the fleet's status while the server still runs, then stops the
supervisor with SIGTERM, as `systemctl stop` would. The closing hint says how to look
again: the jobs stay in the database, which `pgfleet dev` starts again.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys

from examples import burst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args(argv)
    pgfleet = shutil.which("pgfleet")
    command = [pgfleet] if pgfleet else [sys.executable, "-m", "pgfleet"]
    supervisor = subprocess.Popen([*command, "dev", "-c", "examples/pgfleet.yaml"])
    try:
        code = burst.main(["--count", str(args.count), "--no-hint"])
        if code == 0:
            for look in (["jobs", "list", "--state", "dead"], ["status"]):
                print(f"\n$ pgfleet {' '.join(look)}", flush=True)
                code = code or subprocess.run([*command, *look], check=False).returncode
    finally:
        supervisor.send_signal(signal.SIGTERM)
        stopped = supervisor.wait(120)
    print(f"supervisor exited with status {stopped}")
    print("to look again, the jobs are kept: `pgfleet dev -c examples/pgfleet.yaml` in one"
          " terminal, then `pgfleet jobs list --state dead` in another")
    return code or stopped


if __name__ == "__main__":
    sys.exit(main())
