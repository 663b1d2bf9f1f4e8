"""The run registry on shared storage: one JSON line per submission, appended under a lock.

Several users and processes submit into one output directory at once; a filelock serializes the
appends (the lock file lives beside the registry, on the same shared file system). Each line is
written with a single write() and fsync'd before the lock is released, so a reader (which takes
no lock) sees whole lines only, except a torn last line of a crashed writer, which it skips.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

REGISTRY_DIR = ".hpceval"
REGISTRY_FILE = "runs.jsonl"


def registry_path(output_dir: Path) -> Path:
    return output_dir / REGISTRY_DIR / REGISTRY_FILE


def register_run(output_dir: Path, entry: dict[str, Any]) -> None:
    from filelock import FileLock

    path = registry_path(output_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({**entry, "registered_at": time.time()}, sort_keys=True) + "\n"
    with FileLock(str(path) + ".lock", timeout=60), path.open("a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def registry_stamp(output_dir: Path) -> list[int] | None:
    """(size, mtime_ns) of the registry: the local index re-reads it only when this changes."""
    try:
        st = registry_path(output_dir).stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def read_registry(output_dir: Path) -> list[dict[str, Any]]:
    path = registry_path(output_dir)
    if not path.is_file():
        return []
    runs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line from a crashed writer is skipped, not fatal
        if isinstance(entry, dict) and "invocation_id" in entry:
            runs.append(entry)
    return runs
