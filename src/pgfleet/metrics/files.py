"""Compaction of prometheus-client's multiprocess files.

Every process that ever counted something leaves counter_PID.db and histogram_PID.db
behind; prometheus-client only removes the files of live-mode gauges when a process dies.
A host that recycles workers for months would otherwise merge thousands of files on every
scrape. The exporter folds the files of dead processes into one archive per kind, which
the collector reads like any other (it takes the metric type from the name's first part).

A crash between writing the archive and removing the merged files would count that batch
twice; the window is two system calls wide, and a reboot starts with a fresh directory.
"""

from __future__ import annotations

import os
import re
import struct
from collections import defaultdict
from pathlib import Path

from prometheus_client.mmap_dict import MmapedDict

_DEAD_CANDIDATE = re.compile(r"^(counter|histogram)_(\d+)\.db$")
_MERGING = ".merging"
# prometheus_client's file header: the bytes used (4) and padding (4).
_HEADER = 8
# Below this many dead files, merging them costs more than reading them.
COMPACT_AFTER = 20
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_files(directory: str | Path) -> list[Path]:
    found = []
    for path in Path(directory).iterdir():
        match = _DEAD_CANDIDATE.match(path.name)
        if match and not _alive(int(match[2])):
            found.append(path)
    return found


def compact(directory: str | Path, threshold: int = COMPACT_AFTER) -> int:
    """Fold dead processes' counter and histogram files into archives; returns how many
    files were folded. Only one process (the exporter) may call this."""
    folder = Path(directory)
    leftovers = list(folder.glob(f"*.db{_MERGING}"))  # from an interrupted compaction
    dead = _without_empty(dead_files(folder))
    if len(dead) + len(leftovers) < threshold:
        return 0
    # Renamed first: the collector only reads *.db, so a file is never read twice.
    for path in dead:
        path.rename(path.with_name(path.name + _MERGING))
    merging = list(folder.glob(f"*.db{_MERGING}"))
    by_kind: dict[str, list[Path]] = defaultdict(list)
    for path in merging:
        by_kind[path.name.split("_", 1)[0]].append(path)
    for kind, paths in by_kind.items():
        _fold(folder / f"{kind}_archive.db", paths)
    for path in merging:
        path.unlink()
    return len(merging)


def _without_empty(dead: list[Path]) -> list[Path]:
    """Remove the files of dead processes that never sized them (created, then killed
    before the first write: a worker that crashes at start): they hold no counts, and
    prometheus_client cannot read an empty file, so one would fail every scrape."""
    kept = []
    for path in dead:
        try:
            empty = path.stat().st_size < _HEADER  # not even its header written
        except FileNotFoundError:
            continue
        if empty:
            path.unlink(missing_ok=True)
        else:
            kept.append(path)
    return kept


def _fold(archive: Path, sources: list[Path]) -> None:
    totals: dict[str, float] = defaultdict(float)
    for path in ([archive] if archive.exists() else []) + sources:
        try:
            values = MmapedDict.read_all_values_from_file(str(path))  # type: ignore[no-untyped-call]
        except (struct.error, ValueError):
            continue  # torn by a crash mid-allocation: its counts cannot be read back
        for key, value, *_ in values:
            totals[key] += value
    temporary = archive.with_name(archive.name + ".tmp")
    temporary.unlink(missing_ok=True)
    out = MmapedDict(str(temporary))  # type: ignore[no-untyped-call]
    try:
        for key, value in totals.items():
            out.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]
    finally:
        out.close()  # type: ignore[no-untyped-call]
    os.replace(temporary, archive)
