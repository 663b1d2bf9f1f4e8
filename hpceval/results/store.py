"""The done marker that protects finished results (writes are atomic: hpceval.storage).

A task's ``done`` marker is written last; once it exists, nothing overwrites that task's
results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpceval.contract import DONE_MARKER, MANIFEST_FILE, RESULTS_FILE, is_done
from hpceval.storage import atomic_write_json, atomic_write_text


class ResultsAlreadyFinal(RuntimeError):
    """A task is marked done; its results must not be replaced by a partial run."""


def finalize_task(task_dir: Path, results_json: str, manifest: dict[str, Any]) -> None:
    """Write results and manifest, then the done marker; refuse if the task is already done."""
    if is_done(task_dir):
        raise ResultsAlreadyFinal(f"{task_dir} is already done; its results are kept")
    atomic_write_text(task_dir / RESULTS_FILE, results_json)
    atomic_write_json(task_dir / MANIFEST_FILE, manifest)
    atomic_write_text(task_dir / DONE_MARKER, "")
