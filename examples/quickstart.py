"""`make quickstart`: the README's quick start in one terminal.

Starts `pgfleet dev -c examples/pgfleet.yaml` (an embedded PostgreSQL unless a database
URL is configured), enqueues a burst with examples/burst.py and watches it finish, then
stops the supervisor with SIGTERM, as `systemctl stop` would.
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
        code = burst.main(["--count", str(args.count)])
    finally:
        supervisor.send_signal(signal.SIGTERM)
        stopped = supervisor.wait(120)
    print(f"supervisor exited with status {stopped}")
    return code or stopped


if __name__ == "__main__":
    sys.exit(main())
