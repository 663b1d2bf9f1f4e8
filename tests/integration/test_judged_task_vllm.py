"""A judged task end to end with real models: the model under test AND its judge are both
SmolLM2-135M served by real vLLM (the CPU build), the task is hpceval's shipped
lm-eval-upstream.judged_qa run by the real lm-evaluation-harness.

* directly (no Slurm): two `vllm serve` processes, the catalogue's rendered lm_eval command;
  the judge's own access log shows one chat request per sample, lm-eval's results file holds
  the score, and a judge that cannot be reached fails the task instead of scoring 0;
* in a job on the dev cluster (``hpceval submit``): ``deployment: vllm-cpu`` for the model and
  ``auxiliary_deployments.judge`` (vllm-cpu too) on a slice of the same node, the task naming
  its judge as ``auxiliary_deployments.judge.chat_url``; the judge's server log in the run
  directory counts one request per sample, hpceval's results.json equals lm-eval's own results
  file, and ``hpceval resume`` of the task replays the judge's answers from the judge proxy's
  cache (the judge gets no new request).

The judge machinery itself (placement, proxy, cache) with stand-in servers: test_judge_job.py.
Needs what test_real_vllm.py needs (tests/integration/vllm_support.py): HPCEVAL_VLLM_PYTHON and
the SmolLM2 venv; they skip without them, or fail with HPCEVAL_REQUIRE_VLLM=1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import site
from support.ports import free_port
from support.site_users import UserTmp

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.backends.slurm.states import Phase
from hpceval.runs.state import Tracker
from hpceval.tasks import load_catalogue
from hpceval.tasks.command import render_command
from hpceval.tasks.definitions import GENERIC_PARAMS
from tests.integration.vllm_support import (
    SHARED_NAME,
    Launched,
    Served,
    find_model_dir,
    find_vllm_bin,
    hpceval,
    preset_env,
    resume,
    submit,
    wait,
)

pytestmark = pytest.mark.slow

TASK = "lm-eval-upstream.judged_qa"
MODEL, JUDGE = SHARED_NAME, "smollm2-judge"  # the model: the shared server (vllm_support)
LIMIT = 8  # samples: one generation and one judge request each
SERVE_ARGS = ["--max-model-len", "1024", "--dtype", "bfloat16", "--enforce-eager"]
JUDGE_REQUEST = re.compile(r'"POST /v1/chat/completions HTTP/1\.1" 200')


def own_results(output_dir: Path) -> dict[str, float]:
    """judged_qa's scores as lm-eval's own results_*.json holds them ("metric,filter")."""
    own = json.loads(next(output_dir.rglob("results_*.json")).read_text())["results"]
    return {k: v for k, v in own["judged_qa"].items()
            if "," in k and "_stderr" not in k and isinstance(v, int | float)}


def run_rendered_lm_eval(model_url: str, judge: dict[str, str], output_dir: Path,
                         hf_home: Path) -> subprocess.CompletedProcess[str]:
    """The catalogue's lm_eval command for judged_qa, rendered as a job renders it, run with
    the values the job script would export, offline."""
    catalogue = load_catalogue()
    task = catalogue.resolve(TASK).task
    params: dict[str, Any] = dict.fromkeys(GENERIC_PARAMS)
    params.update(parallelism=2, request_timeout=120, limit_samples=LIMIT,
                  extra={**task.params["extra"], "judge": judge})
    command = render_command(catalogue.harness(task.harness), task, params, model_id=MODEL,
                             api_key_env=None)
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update({"HPCEVAL_ENDPOINT_URL": f"{model_url}/v1/chat/completions",
                "HPCEVAL_OUTPUT_DIR": str(output_dir), "HF_HOME": str(hf_home),
                "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "OPENAI_API_KEY": "EMPTY", "no_proxy": f"127.0.0.1,{site.login_address()}",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="session")
def judge_launched(vllm_bin: Path, model_dir: Path,
                   user_tmp_factory: UserTmp) -> Iterator[Launched]:
    """The direct test's own judge, launched (not waited for) before the shared server's
    fixture waits for that server: the two CPU start-ups overlap. Session-scoped only so that
    pytest sets it up before smollm2_server (same scope: the test's argument order); the test
    stops it when it ends."""
    server = Launched(vllm_bin, model_dir, JUDGE, user_tmp_factory.mktemp("judge") / "judge.log",
                      SERVE_ARGS)
    try:
        yield server
    finally:
        server.stop()


def test_judged_task_with_real_lm_eval_and_a_real_vllm_judge(
        judge_launched: Launched, smollm2_server: Served, user_tmp: Path) -> None:
    # The model under test is the session's shared server (vllm_support.smollm2_server); the
    # judge is this test's own, so its access log holds the judge's requests and nothing else.
    started = time.monotonic()
    model, model_log_start = smollm2_server.base, smollm2_server.log_size()
    judge_log = judge_launched.log_path
    # the judge ends with this test, before the Slurm tests start servers of their own
    try:
        judge = judge_launched.healthy()
        ready = time.monotonic() - started
        out = run_rendered_lm_eval(model, {"url": f"{judge}/v1/chat/completions",
                                           "model_id": JUDGE}, user_tmp / "out", user_tmp / "hf")
        assert out.returncode == 0, out.stderr[-4000:]
        # The judge's own log: one chat request per sample, each answered.
        judged = JUDGE_REQUEST.findall(judge_log.read_text())
        generated = smollm2_server.requests_since(model_log_start, JUDGE_REQUEST)
        assert len(judged) == LIMIT and generated == LIMIT, (judged, generated)
        scores = own_results(user_tmp / "out")
        assert set(scores) == {"judge_acc,none", "judge_unparsed,none"}
        # The aggregate is the mean of the per-sample verdicts lm-eval logged.
        samples = [json.loads(line) for line in
                   next((user_tmp / "out").rglob("samples_judged_qa_*.jsonl")).open()]
        assert len(samples) == LIMIT
        for metric in ("judge_acc", "judge_unparsed"):
            assert scores[f"{metric},none"] == pytest.approx(
                sum(s[metric] for s in samples) / LIMIT)

        # A judge nobody answers on: the task fails, naming the judge; it does not score 0.
        dead = f"http://127.0.0.1:{free_port()}/v1/chat/completions"
        failed = run_rendered_lm_eval(model, {"url": dead, "model_id": JUDGE},
                                      user_tmp / "out-dead", user_tmp / "hf")
        assert failed.returncode != 0
        assert f"judge {dead} did not answer after 3 attempts" in failed.stderr[-6000:]
        assert not list((user_tmp / "out-dead").rglob("results_*.json"))
    finally:
        judge_launched.stop()
    print(f"\njudged_qa direct: judge ready {ready:.0f} s into the test (launched beside the "
          f"shared server), {len(judged)} judge requests, scores {scores}, whole test "
          f"{time.monotonic() - started:.0f} s")


# --- in a job on the dev cluster: the judge served in the allocation -----------------------

def job_run(model_dir: Path) -> dict[str, Any]:
    """Model and judge both vllm-cpu SmolLM2 on one node of 2 (fake) GPUs: the judge a slice
    of one GPU beside the model (num_nodes: 0); CPU vLLM ignores the GPUs, Slurm counts them."""
    served = {"checkpoint_path": str(model_dir), "max_model_len": 1024,
              "extra_args": ["--enforce-eager", "--dtype", "bfloat16"]}
    judge = {"type": "vllm", "runtime": "host", "num_nodes": 0, "tensor_parallel_size": 1,
             "served_model_name": JUDGE, "health_timeout": 900, **served,
             "env_vars": preset_env()}
    return {
        "defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
        "execution": {"gpus_per_node": 2},
        "deployment": {"served_model_name": MODEL, **served},
        "auxiliary_deployments": {"judge": judge},
        "target": {"api_endpoint": {"type": "chat"}},
        "evaluation": {"params": {"parallelism": 2, "request_timeout": 300}, "tasks": [
            {"name": TASK, "params": {"limit_samples": LIMIT, "extra": {"judge": {
                "url": "auxiliary_deployments.judge.chat_url",
                "model_id": "auxiliary_deployments.judge.model_id"}}}}]},
    }


def served_requests(log: Path) -> int:
    return len(JUDGE_REQUEST.findall(log.read_text())) if log.exists() else 0


def sweep_report(run_dir: Path) -> str:
    """What a failed sweep assertion shows: each job's log, and for each model its harness's
    and proxies' last lines and the requests each server answered (a task that hangs is
    otherwise a bare count)."""
    parts = [p.read_text()[-3000:] for p in sorted(run_dir.rglob("slurm-*.log"))]
    for model in sorted(run_dir.glob("models/*")):
        served = {str(p.relative_to(model)): served_requests(p)
                  for p in sorted(model.rglob("server/instance-*.log"))}
        parts.append(f"--- {model.name}: requests answered {served}")
        for log in (*sorted(model.glob("tasks/*/harness.log")), *sorted(model.rglob("proxy.log"))):
            parts.append(f"--- {log.relative_to(run_dir)} (last lines)\n"
                         + "\n".join(log.read_text(errors="replace").splitlines()[-25:]))
    return "\n".join(parts)


@pytest.mark.slurm
def test_judged_task_in_a_job_with_its_judge_in_the_allocation(
        slurm_cluster: CommandSlurmClient, user_tmp: Path) -> None:
    vllm_bin, model_dir = find_vllm_bin(), find_model_dir()
    started = time.monotonic()
    job_id, run_dir = submit(user_tmp, job_run(model_dir), vllm_bin)
    state = wait(slurm_cluster, job_id, run_dir)
    model = next(run_dir.glob("models/*"))
    job_log = (model / f"slurm-{job_id}.log").read_text()
    assert state == "COMPLETED", job_log[-6000:]
    first_job = time.monotonic() - started
    # Two real `vllm serve` processes in the job: the model's and the judge's.
    judge_logs = sorted((model / "auxiliary" / "judge" / "server").glob("instance-*.log"))
    assert judge_logs, sorted(p.relative_to(model) for p in model.rglob("*.log"))
    assert f"--served-model-name {JUDGE}" in job_log and f"--served-model-name {MODEL}" in job_log
    # The judge's own access log: one chat request per sample; the model's: one generation each.
    judged = sum(served_requests(p) for p in judge_logs)
    generated = sum(served_requests(p) for p in (model / "server").glob("instance-*.log"))
    assert judged == LIMIT and generated == LIMIT, (judged, generated)
    # hpceval's results.json holds exactly lm-eval's own numbers.
    task_dir = model / "tasks" / TASK
    result = json.loads((task_dir / "results.json").read_text())
    ours = {f"{m['name']},{m['filter'] or 'none'}": m["value"] for m in result["metrics"]}
    own = own_results(task_dir / "harness")
    assert ours == own and set(own) == {"judge_acc,none", "judge_unparsed,none"}, (ours, own)
    # the judge's proxy sampled the judge's vLLM too: `info` shows its load after the model's
    shown = hpceval("info", str(run_dir)).stdout
    assert re.search(r"^server     \S+/auxiliary/judge: waiting peak \d+", shown, re.M), shown

    # The task again in a resumed job (as if the first had stopped before recording it): the
    # judge proxy's cache answers, so the (new) judge server gets no request at all.
    for name in ("done", "results.json"):
        (task_dir / name).unlink()
    model_logs = sorted((model / "server").glob("instance-*.log"))
    before = {p: p.read_text() for p in (*judge_logs, *model_logs)}
    second = resume(slurm_cluster, run_dir, model, vllm_bin)
    log2 = (model / f"slurm-{second}.log").read_text()
    # (server logs are appended to: count what this job's servers added)
    new_judge_lines = sum(served_requests(p) - len(JUDGE_REQUEST.findall(before[p]))
                          for p in judge_logs)
    new_model_lines = sum(served_requests(p) - len(JUDGE_REQUEST.findall(before[p]))
                          for p in model_logs)
    assert "--served-model-name " + JUDGE in log2  # the judge was started again, and idle
    assert (new_judge_lines, new_model_lines) == (0, 0)
    # what the first job's servers put in their caches seeded this job's (job.compile_cache):
    # per engine and model, so the judge (the same model) and the model share one store, to
    # which the first of them to end added its files and the other nothing new
    first_said = "".join(before[log] for log in (*model_logs, *judge_logs))
    assert re.search(r"compile cache: [1-9]\d* new files .* kept in \S+/compile-cache/vllm-",
                     first_said), first_said[-3000:]
    for log in (*model_logs, *judge_logs):
        said = log.read_text()[len(before[log]):]
        assert re.search(r"compile cache: [1-9]\d* files \(.*\) from \S+/compile-cache/vllm-",
                         said), said[-3000:]
    again = json.loads((task_dir / "results.json").read_text())
    assert {f"{m['name']},{m['filter'] or 'none'}": m["value"] for m in again["metrics"]} == ours
    print(f"\njudged_qa in a job: first job {first_job:.0f} s, {judged} judge requests, "
          f"scores {ours}; resumed job: {new_judge_lines} new judge requests, "
          f"whole test {time.monotonic() - started:.0f} s")


# --- a sweep: ONE judge job serves every model's job ------------------------------------------

@pytest.mark.slurm
def test_a_sweep_shares_one_real_vllm_judge_job(slurm_cluster: CommandSlurmClient,
                                                user_tmp: Path) -> None:
    """Two models (SmolLM2 twice, as two sweep elements) and a vllm-cpu judge with
    ``scope: sweep``: the judge loads once, in a job of its own, and serves both models' tasks
    through each job's judge proxy, with the token its vLLM requires (VLLM_API_KEY) read from the
    judge job's 0600 token file; the aggregation step ends it."""
    vllm_bin, model_dir = find_vllm_bin(), find_model_dir()
    started = time.monotonic()
    run = job_run(model_dir)
    run["execution"] = {"gpus_per_node": 1, "max_walltime": "00:20:00"}
    run["auxiliary_deployments"]["judge"].update(num_nodes=1, scope="sweep")
    run["models"] = [{"name": "model-a"}, {"name": "model-b"}]
    run["execution"] = {"walltime": "00:15:00", "output_dir": str(user_tmp / "runs"),
                        **run["execution"]}
    path = user_tmp / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    out = hpceval("submit", str(path), vllm_bin=vllm_bin)
    assert out.returncode == 0, out.stderr + out.stdout
    found = re.search(r"^run directory: (.+)$", out.stdout, re.M)
    assert found, out.stdout
    run_dir = Path(found.group(1))
    tracker = Tracker(slurm_cluster, min_interval_s=1.0)
    tracker.add(run_dir)
    deadline = time.monotonic() + 900
    while True:
        (state,) = tracker.refresh()
        judge_state = state.judges[0] if state.judges else None
        if state.phase.terminal and judge_state is not None and judge_state.phase.terminal:
            break
        assert time.monotonic() < deadline, (state.phase, state.reason, state.judges)
        time.sleep(1)
    judge_dir = run_dir / "auxiliary" / "judge"
    judge_logs = sorted((judge_dir / "server").glob("instance-*.log"))
    logs = sweep_report(run_dir)
    assert len(judge_logs) == 1, logs
    # ONE judge load for the sweep, none in the models' jobs
    assert judge_logs[0].read_text().count("Starting vLLM server on") == 1
    assert not list(run_dir.glob("models/*/auxiliary/judge/server/*.log"))
    # both models' tasks were judged by it: LIMIT chat requests each, in the judge's own log
    assert served_requests(judge_logs[0]) == 2 * LIMIT, logs
    for key in ("model-a", "model-b"):
        task_dir = run_dir / "models" / key / "tasks" / TASK
        assert (task_dir / "done").exists(), logs
        result = json.loads((task_dir / "results.json").read_text())
        ours = {f"{m['name']},{m['filter'] or 'none'}": m["value"] for m in result["metrics"]}
        assert ours == own_results(task_dir / "harness")
    assert state.phase is Phase.DONE, (state.reason, logs)
    assert (judge_state.phase, judge_state.reason) == (Phase.DONE, "stopped after the sweep")
    # each element's ledger knows its time in the queue: jobs.json holds it as <array>_<i>,
    # which its job marked beside its own id (preamble.j2)
    rows = json.loads(hpceval("results", str(run_dir), "--json").stdout)
    for row in rows:
        (job,) = row["ledger"]["jobs"]
        assert job["queued_s"] is not None and job["queued_s"] >= 0, row["ledger"]
    print(f"\njudged_qa sweep of 2 models, one vLLM judge job: {served_requests(judge_logs[0])} "
          f"judge requests, whole test {time.monotonic() - started:.0f} s")
