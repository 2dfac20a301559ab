"""Put on PYTHONPATH, this makes the first import of the database driver take seconds
when PGFLEET_TEST_SLOW_DRIVER names a file that does not exist yet: it writes that file
first, so a test knows a `pgfleet` process is inside the package's own imports (which
import the driver) and can signal it there. Python imports `sitecustomize` at start-up.
Not a package: this directory holds only this module."""

from __future__ import annotations

import importlib.abc
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any


class _SlowDriver(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> None:
        marker = os.environ.get("PGFLEET_TEST_SLOW_DRIVER")
        if fullname == "psycopg" and marker and not Path(marker).exists():
            Path(marker).write_text(str(os.getpid()))
            time.sleep(3.0)
        return None  # the usual finders import it


sys.meta_path.insert(0, _SlowDriver())
