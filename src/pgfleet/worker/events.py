"""What a worker lets others watch: a few events and counters, read by tests and by an
embedding program instead of the worker's internals. Written only by the worker's main
thread (never by a signal handler)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class WorkerEvents:
    started: threading.Event = field(default_factory=threading.Event)  # connected, running
    stopped: threading.Event = field(default_factory=threading.Event)  # shut down cleanly
    connects: int = 0  # database connections opened by the main loop
    polls: int = 0  # claims made (alone or fused with a completion)
    completed: int = 0  # outcomes committed
    timeouts: int = 0  # jobs interrupted for passing their timeout
