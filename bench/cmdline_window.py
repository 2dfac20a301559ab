"""How long another local account can read a --database-url value in
/proc/PID/cmdline after `python -m pgfleet --database-url URL status` is started.

    python -m bench.cmdline_window [RUNS]

Polls the child's command line as fast as it can and prints, per run, the last moment
(seconds after the exec) the value was still visible. A figure, not a pass/fail check:
it is mostly the interpreter's own start-up, so it depends on the machine and its load.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

MARK = "WINDOWPROBE"


def one_run() -> float:
    url = f"postgresql://u:{MARK}@127.0.0.1:1/x"
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pgfleet", "--database-url", url, "status"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = 0.0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/cmdline", "rb") as handle:
                shown = handle.read()
        except OSError:
            break
        if MARK.encode() in shown:
            last = time.monotonic() - started
    proc.wait()
    return last


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    seen = [one_run() for _ in range(runs)]
    print("visible for (s): " + " ".join(f"{s:.3f}" for s in seen))
    print(f"median {statistics.median(seen):.3f} s, max {max(seen):.3f} s over {runs} runs")


if __name__ == "__main__":
    main()
