"""One column added to the results frame from files beside its tasks (runtime, server load,
ledger, flags): each file read once however many metric rows its task or model has."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def task_folder(task_dir: str) -> str:
    """The key of a task's own files: its folder."""
    return task_dir


def model_folder(task_dir: str) -> str:
    """The key of a model's files: <model dir> of <model dir>/tasks/<task>."""
    return os.path.dirname(os.path.dirname(task_dir))


def with_column(frame: Any, name: str, value_of: Callable[[str, str], Any], *,
                key: Callable[[str], str] = task_folder, empty: Any = None) -> Any:
    """A copy of the results frame plus column `name`: on each row ``value_of(folder,
    run_dir)`` for its ``key(task_dir)`` folder, computed once per folder; `empty` on every
    row of a frame without task folders."""
    out = frame.copy()
    cache: dict[str, Any] = {}
    task_dirs = out["task_dir"].tolist() if "task_dir" in out.columns else []
    run_dirs = out["run_dir"].tolist() if "run_dir" in out.columns else [""] * len(task_dirs)
    column = []
    for task_dir, run_dir in zip(task_dirs, run_dirs, strict=True):
        folder = key(str(task_dir))
        if folder not in cache:
            cache[folder] = value_of(folder, str(run_dir) if run_dir else "")
        column.append(cache[folder])
    out[name] = column if column or out.empty else empty
    return out
