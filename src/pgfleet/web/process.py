"""The web UI as one more child of the supervisor (the `web:` section of pgfleet.yaml).

uvicorn serves on a thread of its own; the main thread is the child base's loop. It beats
the beacon only while the server's event loop keeps ticking, so a UI stuck in a handler
goes stale and is replaced like a frozen worker, and it stops the server on TERM.
"""

from __future__ import annotations

import logging
import threading
import time

import uvicorn

from pgfleet.errors import PgfleetError
from pgfleet.runtime.beacon import Beacon
from pgfleet.runtime.child import BEAT_EVERY, ChildProcess
from pgfleet.web.server import OPEN_TO_LOCAL_USERS, STOP_GRACE, bind, server_config, url_of
from pgfleet.web.settings import WebSettings

log = logging.getLogger("pgfleet.web")

# uvicorn ticks every 0.1 s; a loop silent for this long is stuck, not busy.
TICK_STALE = 5.0


class _TickingServer(uvicorn.Server):
    """uvicorn's server, remembering when its event loop last ticked."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.last_tick = time.monotonic()

    async def on_tick(self, counter: int) -> bool:
        self.last_tick = time.monotonic()
        return await super().on_tick(counter)


class WebChild(ChildProcess):
    def __init__(self, settings: WebSettings, beacon: Beacon | None = None) -> None:
        super().__init__(beacon)
        self.settings = settings

    def run(self) -> int:
        try:
            self.settings.check()
            sock = bind(self.settings.host, self.settings.port)
        except PgfleetError as exc:
            log.error("web UI cannot start: %s", exc)
            return 1
        # log_config=None: the supervisor's logging stays as it is in this process.
        server = _TickingServer(server_config(self.settings, log_config=None,
                                              timeout_graceful_shutdown=STOP_GRACE))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                  name="pgfleet-web-http", daemon=True)
        thread.start()
        log.info("web UI listening on %s%s", url_of(sock, self.settings.tls),
                 " (read-only)" if self.settings.read_only else "")
        if not self.settings.has_auth:
            log.warning("web UI: %s", OPEN_TO_LOCAL_USERS)
        try:
            return self._watch(server, thread)
        finally:
            server.should_exit = True
            if self.stop_mode == "quick":
                server.force_exit = True
            thread.join(STOP_GRACE + 1.0)

    def _watch(self, server: _TickingServer, thread: threading.Thread) -> int:
        while not self.stopping:
            if self.parent_gone():
                log.info("web UI: the supervisor is gone; stopping")
                return 0
            if not thread.is_alive():
                log.error("web UI: the server stopped by itself; exiting to be restarted")
                return 1
            if time.monotonic() - server.last_tick < TICK_STALE:
                self.beat()
            self.wakeup.wait(BEAT_EVERY)
        return 0
