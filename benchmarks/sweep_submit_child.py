"""One sweep submit, timed; run by sweep_submit.py with PYTHONPATH naming the hpceval to time.

    python benchmarks/sweep_submit_child.py SIZE WORK_DIR   (prints one JSON line)

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

MAX_ARRAY = 1001  # the dev cluster's MaxArraySize


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
               dependency: str | None = None) -> str:
        self.calls += 1
        return str(900000 + self.calls)

    def sacct(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}

    def cancel(self, job_ids: Sequence[str]) -> None:
        return None

    def squeue(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}


def child(size: int, folder: Path) -> dict[str, Any]:
    """One submit of a `size`-model sweep with whichever hpceval is on sys.path."""
    from hpceval.backends.slurm.client import CommandSlurmClient
    from hpceval.config import load_run
    from hpceval.runs.submit import create_run, submit_prepared

    path = run_yaml(folder, size)
    real = size <= MAX_ARRAY
    client: Any
    submitted: list[str] = []
    if real:
        class Held(CommandSlurmClient):
            def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
                       dependency: str | None = None) -> str:
                job = super().submit(script_path, extra_args=["--hold", *extra_args],
                                     dependency=dependency)
                submitted.append(job)
                return job
        client = Held()
    else:
        client = RecordingClient()
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
    return {"total_s": end - start, "load_s": loaded - start, "write_s": written - loaded,
            "submit_s": end - written, "sbatch": "real --hold" if real else "recorded",
            "files": sum(1 for _ in run.run_dir.rglob("*"))}


if __name__ == "__main__":
    import hpceval

    result = child(int(sys.argv[1]), Path(sys.argv[2]))
    print(json.dumps({**result, "hpceval": str(Path(hpceval.__file__).resolve().parent)}))
