"""Log lines carry UTC times, whatever zone the process was moved to (issue: under
Django, whose settings call time.tzset, the supervisor's lines came out in the site's zone
with no mark of it)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest

LOG_ONE_LINE = """
import logging, os, time, sys
from pgfleet.runtime import logs
os.environ["TZ"] = "Asia/Kathmandu"   # +05:45, as Django's TIME_ZONE would set it
time.tzset()
logs.setup(sys.argv[1])
logging.getLogger("pgfleet.test").info("hello")
"""


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_log_lines_are_stamped_in_utc_whatever_the_process_zone(fmt: str) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    out = subprocess.run([sys.executable, "-c", LOG_ONE_LINE, fmt], capture_output=True,
                         text=True, check=True).stderr.strip()
    after = datetime.now(UTC)
    stamp = out.split()[0] if fmt == "plain" else out.split('"time": "')[1].split('"')[0]
    assert stamp.endswith("Z"), out
    when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    # Local Kathmandu time would be 5 h 45 min off either bound.
    assert before <= when <= after, (out, before, after)
    assert "INFO" in out or '"level": "info"' in out
