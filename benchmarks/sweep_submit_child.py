"""One sweep submit, timed; run by sweep_submit.py with PYTHONPATH naming the hpceval to time.

    python benchmarks/sweep_submit_child.py SIZE WORK_DIR [real|recorded]   (one JSON line)

`real` submits to the dev cluster with `sbatch --hold` and cancels what it submitted; every job
id is also appended to WORK_DIR/submitted.txt as sbatch returns it, so the parent cancels them
if this process dies first. `recorded` stops at the sbatch call (a hpceval from before sweeps
were split cannot submit more than MaxArraySize models), for a cluster that would take the
sweep: the cluster's MaxJobCount is not checked then. Default: real up to MAX_ARRAY models.

No import from the benchmark's helpers: they would put this checkout's hpceval first on the
path, and the baseline is another hpceval.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MAX_ARRAY = 1001  # the dev cluster's MaxArraySize (the parent passes real/recorded itself)
SUBMITTED = "submitted.txt"  # in WORK_DIR: every job id submitted, one a line


def run_yaml(folder: Path, models: int) -> Path:
    import yaml

    run: dict[str, Any] = {
        "execution": {"gpus_per_node": 0, "output_dir": str(folder / "out"),
                      "array_parallelism": 4},
        "deployment": {"type": "none"},
        "target": {"api_endpoint": {"url": "http://127.0.0.1:9/v1/chat/completions",
                                    "model_id": "bench"}},
        "evaluation": {"tasks": [{"name": "gsm8k"}, {"name": "hellaswag"}]},
        "models": [{"name": f"model-{i:05d}"} for i in range(models)],
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    return path


class RecordingClient:
    """Stands in for sbatch where the dev cluster refuses an array this large."""

    def __init__(self) -> None:
        self.calls = 0

    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None, script_args: Sequence[str] = ()) -> str:
        self.calls += 1
        return str(900000 + self.calls)

    def max_array_size(self) -> int:
        return MAX_ARRAY

    def sacct(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}

    def cancel(self, job_ids: Sequence[str]) -> None:
        return None

    def squeue(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}


def _as_if_the_cluster_took_it() -> None:
    """A recorded submit stands for a site that takes the sweep, one that raised MaxJobCount
    for sweeps this large (docs/sites.md): hpceval refuses a run of more jobs than the
    cluster's MaxJobCount (the dev cluster's 10,000 is less than a 10,000-model sweep and its
    aggregation), so that check does not count this cluster's value here. The baseline's
    hpceval has no such check."""
    try:
        from hpceval.backends.slurm import submit_limits
    except ImportError:
        return
    if hasattr(submit_limits, "max_job_count"):
        submit_limits.max_job_count = lambda: None


def child(size: int, folder: Path, real: bool) -> dict[str, Any]:
    """One submit of a `size`-model sweep with whichever hpceval is on sys.path."""
    try:
        from hpceval.backends.slurm.client import CommandSlurmClient
    except ImportError:  # the baseline's hpceval, before hpceval/slurm/ moved into backends
        from hpceval.slurm.client import CommandSlurmClient  # type: ignore[no-redef]
    from hpceval.config import load_run
    from hpceval.runs.submit import create_run, submit_prepared

    path = run_yaml(folder, size)
    client: Any
    submitted: list[str] = []
    log = folder / SUBMITTED
    if real:
        class Held(CommandSlurmClient):
            def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
                       dependency: str | None = None, **more: Any) -> str:
                job = super().submit(script_path, extra_args=["--hold", *extra_args],
                                     dependency=dependency, **more)
                submitted.append(job)
                with log.open("a", encoding="utf-8") as out:
                    out.write(f"{job}\n")
                return job
        client = Held()
    else:
        client = RecordingClient()
        _as_if_the_cluster_took_it()
    start = time.perf_counter()
    configs = load_run(path, profile="local-dev", check_environment=False)
    loaded = time.perf_counter()
    run = create_run(configs)
    written = time.perf_counter()
    try:
        submit_prepared(run, client, written=True)
        end = time.perf_counter()
    finally:
        if real:
            client.cancel(submitted)
    chain = json.loads((run.run_dir / "jobs.json").read_text())["chain"]
    arrays = sum(1 for entry in chain if entry["role"] == "main")
    return {"total_s": end - start, "load_s": loaded - start, "write_s": written - loaded,
            "submit_s": end - written, "arrays": arrays,
            "sbatch": "real --hold" if real else "recorded",
            "files": sum(1 for _ in run.run_dir.rglob("*"))}


if __name__ == "__main__":
    import hpceval

    size = int(sys.argv[1])
    mode = sys.argv[3] if len(sys.argv) > 3 else ("real" if size <= MAX_ARRAY else "recorded")
    result = child(size, Path(sys.argv[2]), mode == "real")
    print(json.dumps({**result, "hpceval": str(Path(hpceval.__file__).resolve().parent)}))
