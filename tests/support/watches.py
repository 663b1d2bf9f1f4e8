"""Shared by the checkpoint-watch tests: checkpoint folders, watch options, a started watch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpceval.watch.control import start_watch
from hpceval.watch.spec import WatchSpec
from support.runs import write_run_file
from support.slurm import FakeSlurm


def write_ckpt(folder: Path, name: str, files: dict[str, str] | None = None) -> Path:
    path = folder / name
    path.mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {"config.json": "{}", "model.safetensors": "w" * 64}).items():
        (path / rel).write_text(text)
    return path


def options(tmp_path: Path, **kw: Any) -> WatchSpec:
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir(exist_ok=True)
    values: dict[str, Any] = {"watch_id": "", "kind": "", "run_file": str(
        write_run_file(tmp_path)), "overrides": (), "profile": "local-dev",
        "checkpoints": str(ckpts), "grace_s": 30, "interval_s": 60, **kw}
    if values.get("marker"):
        values["grace_s"] = None
    return WatchSpec(**values)


def started(tmp_path: Path, fake: FakeSlurm, **kw: Any) -> Path:
    result = start_watch(options(tmp_path, **kw), client=fake)
    return result.watch_dir
