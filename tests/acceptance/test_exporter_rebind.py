"""Issue 13 item 5: the exporter's successor binds its port at once after a HUP, even
though recent scrapes left connections in TIME_WAIT on that port."""

from __future__ import annotations

import signal
from collections.abc import Callable

from tests.support.fleet import Fleet
from tests.support.prometheus import free_port, http_get, reachable
from tests.support.workers import wait_for


def test_livez_and_metrics_answer_again_soon_after_a_hup(
    fleet: Callable[..., Fleet]
) -> None:
    target = f"127.0.0.1:{free_port()}"
    f = fleet({"default": {"processes": 1}}, metrics={"enabled": True, "listen": target})
    wait_for(lambda: reachable(f"http://{target}/livez"), timeout=30)
    # Scrapes the server closes first: each leaves a TIME_WAIT on the exporter's port.
    for _ in range(5):
        assert http_get(f"http://{target}/metrics")[0] == 200
    f.signal(signal.SIGHUP)
    wait_for(lambda: f.log().count("exporter listening on") == 2, timeout=20)
    # Well under the minute TIME_WAIT lasts: a bound against hangs, not a timing claim.
    wait_for(lambda: reachable(f"http://{target}/livez"), timeout=20)
    assert http_get(f"http://{target}/metrics")[0] == 200
    assert "exporter cannot listen" not in f.log()
