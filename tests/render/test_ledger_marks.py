"""The job script's marks (preamble.j2's `mark`), from a rendered job run in bash: every mark
of a job without servers in order, the GPUs it holds, and phases that add up to its time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from render_helpers import resolve

from hpceval.config import with_tasks
from hpceval.render import JobContext, render_job
from hpceval.results.ledger import read_ledger
from hpceval.tasks import Catalogue


def test_a_job_marks_its_phases_and_they_add_up_to_its_time(catalogue: Catalogue,
                                                            tmp_path: Path) -> None:
    resolved = resolve("local-dev", {
        "execution": {"output_dir": str(tmp_path), "gpus_per_node": 2},
        "deployment": {"type": "none"},
        "target": {"api_endpoint": {"url": "http://127.0.0.1:9/v1/chat/completions",
                                    "model_id": "m", "proxy": False}},
        "evaluation": {"tasks": [{"name": "exit_with", "params": {"extra": {"code": 0}}}]}},
        tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(render_job(with_tasks(resolved, catalogue),
                                 JobContext(str(tmp_path / "run"), "i", "m", sys.executable)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    began = time.time()
    subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, env=env,
                   timeout=120)
    took = time.time() - began
    model = tmp_path / "run" / "models" / "m"
    names = [line.split()[2] for line in (model / "ledger").read_text().splitlines()]
    assert names == ["start", "tasks_done", "teardown", "end"]
    (job,), why = read_ledger(model)
    assert why is None and job.ended and job.gpus == 2 and job.job_id == "local"
    assert job.seconds["load"] == 0 and job.seconds["setup"] > 0
    assert 0 < job.total_s <= took
