"""Where a run's logs are: the job's own log, the servers', the proxy's, each harness's."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from hpceval.backends import backend_for
from hpceval.contract import (
    AUX_DIR,
    HARNESS_LOG,
    PROXY_LOG,
    SERVER_DIR,
    aux_dir,
    model_dir,
    task_dir,
)
from hpceval.errors import HpcevalError
from hpceval.records import ModelRecord, RunRecord
from hpceval.runs.jobs import Jobs


class LogSelectionError(HpcevalError, LookupError):
    pass


def job_log(run_dir: Path, key: str, index: int, jobs: Jobs) -> Path | None:
    """The newest job's log for a model (where its backend writes it)."""
    entry = jobs.current(index)
    if entry is None:
        return None
    return backend_for(entry.kind).log_path(run_dir, key, index, entry)


def select_models(run: RunRecord, model: str | None) -> list[ModelRecord]:
    models = list(run.models)
    if model is None:
        return models
    chosen = [m for m in models if model in (m.key, m.model_id)]
    if not chosen:
        raise LogSelectionError(f"no model {model!r} in this run; it has: "
                                + ", ".join(m.key for m in models))
    return chosen


def _task_key(model: ModelRecord, task: str) -> str:
    for t in model.tasks:
        if task in (t.key, t.task) or t.task.endswith(f".{task}"):
            return t.key
    raise LogSelectionError(f"no task {task!r} for model {model.key}; it has: "
                            + ", ".join(t.task for t in model.tasks))


def log_files(run_dir: Path, run: RunRecord, jobs: Jobs, *, model: str | None = None,
              task: str | None = None, server: bool = False) -> list[tuple[str, Path]]:
    """(label, path) of the logs asked for; paths may not exist yet (a queued job)."""
    out: list[tuple[str, Path]] = []
    for m in select_models(run, model):
        folder = model_dir(run_dir, m.key)
        if task is not None:
            key = _task_key(m, task)
            out.append((f"{m.key} task {key}", task_dir(run_dir, m.key, key) / HARNESS_LOG))
            continue
        if server:
            found = sorted((folder / SERVER_DIR).glob("*.log"))
            out += [(f"{m.key} server {p.stem}", p) for p in found]
            if (folder / PROXY_LOG).is_file():  # not in jobs against an external endpoint
                out.append((f"{m.key} proxy", folder / PROXY_LOG))
            # judges (auxiliary deployments): their servers' logs and their proxy's
            for aux in sorted(p for p in (folder / AUX_DIR).glob("*") if p.is_dir()):
                out += [(f"{m.key} {aux.name} server {p.stem}", p)
                        for p in sorted((aux / SERVER_DIR).glob("*.log"))]
                if (aux / PROXY_LOG).is_file():
                    out.append((f"{m.key} {aux.name} proxy", aux / PROXY_LOG))
            continue
        path = job_log(run_dir, m.key, m.index, jobs)
        if path is not None:
            out.append((f"{m.key} job", path))
    if model is None and task is None:
        out += _judge_job_logs(run_dir, run, jobs, server=server)
    return out


def _judge_job_logs(run_dir: Path, run: RunRecord, jobs: Jobs, *,
                    server: bool) -> list[tuple[str, Path]]:
    """A sweep's judge jobs (scope: sweep): the newest one's own log (in its folder, named by
    its backend), or with `server` its servers' logs."""
    out: list[tuple[str, Path]] = []
    for name in run.judge_names:
        folder = aux_dir(run_dir, name)
        if server:
            out += [(f"judge {name} server {p.stem}", p)
                    for p in sorted((folder / SERVER_DIR).glob("*.log"))]
        elif (entry := jobs.judge(name)) is not None:
            out.append((f"judge {name} job", backend_for(entry.kind).own_log(folder, entry)))
    return out


def print_logs(files: Sequence[tuple[str, Path]], out: IO[str] = sys.stdout,
               tail: int | None = None) -> None:
    """Each file under its label; `tail`: only its last lines. Memory stays bounded whatever
    a log's size (a harness wrote 1 GiB: reading it whole took 2.8 GB, shared-cluster-4 N7)."""
    for label, path in files:
        print(f"===== {label}: {path}", file=out)
        if not path.is_file():
            print("(not written yet)", file=out)
            continue
        if tail:
            for line in last_lines(path, tail):
                print(line, file=out)
            continue
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                out.write(line if line.endswith("\n") else line + "\n")


def last_lines(path: Path, n: int, block: int = 64 << 10, most: int = 16 << 20) -> list[str]:
    """The last `n` lines of `path`, read backwards a block at a time, at most `most` bytes
    (lines longer than that come cut at their start)."""
    with path.open("rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        data, start = b"", end
        while start > 0 and data.count(b"\n") <= n and end - start < most:
            step = min(block, start)
            start -= step
            handle.seek(start)
            data = handle.read(step) + data
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[-n:]


def follow(files: Sequence[tuple[str, Path]], stop: Callable[[], bool],
           out: IO[str] = sys.stdout, poll_s: float = 1.0,
           sleep: Callable[[float], None] = time.sleep) -> None:
    """tail -f for several files (some may appear later) until `stop()` says the run ended."""
    offsets = {path: 0 for _, path in files}
    labels = {path: label for label, path in files}
    last: Path | None = None
    while True:
        ended = stop()  # asked before reading, so what was written until the end is printed
        for path in offsets:
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size < offsets[path]:
                offsets[path] = 0  # truncated or replaced: start again
            if size == offsets[path]:
                continue
            with path.open("rb") as handle:
                handle.seek(offsets[path])
                chunk = handle.read(size - offsets[path])
            offsets[path] = size
            if len(offsets) > 1 and last != path:
                print(f"===== {labels[path]}", file=out)
            last = path
            out.write(chunk.decode("utf-8", errors="replace"))
            out.flush()
        if ended:
            return
        sleep(poll_s)
