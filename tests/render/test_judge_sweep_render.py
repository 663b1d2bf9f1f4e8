"""The sweep's judge job (an auxiliary deployment with scope: sweep): golden script, refusals.

The judge job is rendered from the model job's partials (header, preamble, teardown,
deployment, health); the golden file shows the whole script an admin reads, and the golden
test's bash -n + shellcheck covers it (tests/golden/*.sbatch).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from render_helpers import backend_env, context, resolve
from test_golden import GOLDEN, MODEL, TASKS, refuse_update_in_ci

from hpceval.config import ResolvedConfig
from hpceval.config.errors import ConfigError
from hpceval.config.schema import AuxiliaryDeploymentSpec
from hpceval.render.judge_job import judge_config, render_judge_job, sweep_judges
from hpceval.render.sweep import render_sweep

JUDGE = AuxiliaryDeploymentSpec(
    type="vllm", checkpoint_path="/models/Qwen2.5-72B-Instruct", served_model_name="qwen-judge",
    tensor_parallel_size=4, scope="sweep", health_timeout=5400,
    image="/images/vllm-openai_v0.11.0.sif")
JUDGE_GOLDEN = "slurm__judge-sweep.sbatch"


def with_aux(resolved: ResolvedConfig, **aux: AuxiliaryDeploymentSpec) -> ResolvedConfig:
    """The auxiliary deployments set on a loaded config (the loader's side is helper A's)."""
    return dataclasses.replace(resolved, spec=dataclasses.replace(
        resolved.spec, auxiliary_deployments=aux))


def sweep_models(tmp_path: Path, profile: str = "slurm", n: int = 3, **aux: Any
                 ) -> list[tuple[str, ResolvedConfig]]:
    base = resolve(profile, {"evaluation": {"tasks": TASKS}, "deployment": {
        "type": "vllm", **MODEL, "tensor_parallel_size": 8}}, tmp_path)
    return [(f"model-{i}", with_aux(base, **(aux or {"judge": JUDGE}))) for i in range(n)]


def test_judge_job_golden(tmp_path: Path) -> None:
    models = sweep_models(tmp_path)
    text = render_judge_job(models[0][1], "judge", context(models[0][1]))
    path = GOLDEN / JUDGE_GOLDEN
    if os.environ.get("UPDATE_GOLDEN") == "1":
        refuse_update_in_ci()
        path.write_text(text)
    assert text == path.read_text(), (
        f"{path.name} differs; if intended, UPDATE_GOLDEN=1 pytest tests/render and review")


def test_judge_job_shape(tmp_path: Path) -> None:
    models = sweep_models(tmp_path)
    resolved = models[0][1]
    text = render_judge_job(resolved, "judge", context(resolved))
    run_dir = context(resolved).run_dir_text
    # its own job: name, nodes = num_nodes, walltime = max_walltime, log in its folder
    assert "#SBATCH --job-name=hpceval-inv-0123456789abcdef-judge-judge" in text
    assert f"#SBATCH --time={resolved.spec.execution.max_walltime}" in text
    assert "#SBATCH --nodes=1 " in text and "#SBATCH --gpus-per-node=8" in text
    assert f"#SBATCH --output={run_dir}/auxiliary/judge/slurm-%j.log" in text
    assert 'MODEL_DIR="$RUN_DIR/auxiliary/$JUDGE_NAME"' in text
    # 8 GPUs at TP=4: two instances, both in endpoint.json; the servers require the token
    assert text.count("launch_server 0 head") == 1 and text.count("launch_server 1 head") == 1
    assert text.index("\nlaunch_server() {") < text.index("\nlaunch_server 0 head")
    assert "export APPTAINERENV_VLLM_API_KEY=\"${HPCEVAL_JOB_TOKEN}\"" in text
    assert text.index('mv -f "$tmp" "$MODEL_DIR/token"') < text.index(
        'mv -f "$tmp" "$MODEL_DIR/endpoint.json"')
    assert "'\"qwen-judge\"'" in text  # model_id as JSON, shell-quoted by the renderer
    # no tasks, no auto-resume, no "every task is done" exit; its only proxy is its https
    # front, whose certificate the models' jobs pin (shared-cluster-4 N1)
    for absent in ("run_task()", "submit_successor", "UNFINISHED_DIRS", "start_model_proxy"):
        assert absent not in text, absent
    assert text.count('start_proxy "$MODEL_DIR"') == 1
    assert '--tls-cert "$PROXY_CERT" --tls-key "$PROXY_KEY" "${UPSTREAM_ARGS[@]}"' in text
    assert "--auto-resume" not in text
    assert judge_config(resolved, "judge", "inv").spec.execution.auto_resume is False


def test_sweep_render_shows_the_judge_and_the_aggregation_stops_it(tmp_path: Path) -> None:
    models = sweep_models(tmp_path)
    scripts = render_sweep(models, context(models[0][1]))
    assert list(scripts.judges) == ["judge"]
    stop = f"{context(models[0][1]).run_dir_text}/auxiliary/judge/stop"
    assert f": > {stop}\n" in scripts.aggregate
    # after the aggregation (which may instead wait for auto-resume successors: then no stop)
    assert scripts.aggregate.index("hpceval.job aggregate") < scripts.aggregate.index(
        stop) and "--resubmit" in scripts.aggregate
    # the elements are the ordinary model jobs: the judge is not in them
    assert all("judge-judge" not in text for text in scripts.elements.values())


def test_scope_job_makes_no_judge_job(tmp_path: Path) -> None:
    in_job = dataclasses.replace(JUDGE, scope="job")
    models = sweep_models(tmp_path, judge=in_job)
    scripts = render_sweep(models, context(models[0][1]))
    assert scripts.judges == {} and "stop" not in scripts.aggregate


def test_command_judge_runs_bash_clean(tmp_path: Path) -> None:
    """A command judge on CPU: the script is valid bash and shellcheck-clean too."""
    from render_helpers import bash_syntax, shellcheck

    cpu = AuxiliaryDeploymentSpec(type="command", command="exec my-judge --port $PORT",
                                  served_model_name="toy-judge", runtime="host",
                                  gpus_per_instance=0, scope="sweep", num_instances=2)
    base = resolve("local-dev", {"evaluation": {"tasks": TASKS}, "execution": {
        "type": "slurm", "gpus_per_node": 0}, "deployment": {
        "type": "command", "command": "exec s --port $PORT", "served_model_name": "m",
        "runtime": "host", "gpus_per_instance": 0}}, tmp_path)
    resolved = with_aux(base, judge=cpu)
    text = render_judge_job(resolved, "judge", context(resolved))
    assert text.count("\nlaunch_server ") == 2  # two instances
    path = tmp_path / "judge.sbatch"
    path.write_text(text)
    bash_syntax(path)
    shellcheck([path])


@pytest.mark.parametrize(("change", "where", "words"), [
    ({"num_nodes": 0}, "auxiliary_deployments.judge.num_nodes", "job of its own"),
    ({"tensor_parallel_size": 3}, "auxiliary_deployments.judge (its own job): deployment",
     "idle"),
])
def test_judge_config_refusals(tmp_path: Path, change: dict[str, Any], where: str,
                               words: str) -> None:
    models = sweep_models(tmp_path, judge=dataclasses.replace(JUDGE, **change))
    with pytest.raises(ConfigError) as err:
        render_sweep(models, context(models[0][1]))
    assert err.value.issues[0].path == where and words in err.value.issues[0].message


def test_scope_sweep_needs_a_sweep_and_one_declaration(tmp_path: Path) -> None:
    models = sweep_models(tmp_path)
    with pytest.raises(ConfigError, match="one model") as err:
        sweep_judges(models[:1])
    assert err.value.issues[0].path == "auxiliary_deployments.judge.scope"
    other = dataclasses.replace(JUDGE, served_model_name="other-judge")
    mixed = [*models[:2], ("model-x", with_aux(models[0][1], judge=other))]
    with pytest.raises(ConfigError) as err:
        sweep_judges(mixed)
    assert err.value.issues[0].path == "models.model-x.auxiliary_deployments.judge"


def test_local_backend_refuses_scope_sweep(tmp_path: Path) -> None:
    base = resolve("local", {"evaluation": {"tasks": TASKS}, "deployment": {
        "type": "vllm", **MODEL, "runtime": "host"}}, tmp_path)
    assert base.spec.execution.type == "local"
    models = [(f"m{i}", with_aux(base, judge=JUDGE)) for i in range(2)]
    with pytest.raises(ConfigError, match="one job at a time") as err:
        sweep_judges(models)
    assert err.value.issues[0].fix.startswith("use scope: job")


def test_endpoint_json_written_by_the_script_is_json(tmp_path: Path) -> None:
    """The printf that writes endpoint.json, run as bash with two URLs and an odd model id."""
    models = sweep_models(tmp_path, judge=dataclasses.replace(
        JUDGE, served_model_name='judge "72b" \\ v2'))
    text = render_judge_job(models[0][1], "judge", context(models[0][1]))
    start = text.index("publish_endpoint() {")
    body = text[start:text.index("\n}\n", start) + 3]
    script = (f"MODEL_DIR={tmp_path}\nHPCEVAL_JOB_TOKEN=abc\nSLURM_JOB_ID=77\n"
              + backend_env(text) + "FRONT_URL=https://n1:8063 TLS_PIN=" + "ab" * 32 + "\n"
              + body + "publish_endpoint\n")
    subprocess.run(["bash", "-c", script], check=True)
    data = json.loads((tmp_path / "endpoint.json").read_text())
    assert data == {"urls": ["https://n1:8063"], "tls_sha256": "ab" * 32,
                    "model_id": 'judge "72b" \\ v2', "job_id": "77"}
    token = tmp_path / "token"
    assert token.read_text() == "abc\n" and (token.stat().st_mode & 0o777) == 0o600


def successor_call(text: str, tmp_path: Path, *, stop: bool, allocations: int = 1
                   ) -> tuple[list[str], str]:
    """Run the judge job's rendered submit_successor with a recording sbatch:
    (the sbatch calls, what the judge's folder's jobs.chain holds)."""
    def function(name: str) -> str:
        start = text.index(f"\n{name}() {{") + 1
        return text[start:text.index("\n}\n", start) + 3]

    folder = tmp_path / "run" / "auxiliary" / "judge"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("stop", "jobs.chain", "loads"):
        (folder / name).unlink(missing_ok=True)
    if stop:
        (folder / "stop").touch()
    (folder / "allocations").write_text("".join(f"{700 + i} 0\n" for i in range(allocations)))
    (folder / "loads").write_text("700 300\n")  # healthy once: no refusal to chain
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "sbatch.calls"
    calls.unlink(missing_ok=True)
    (bin_dir / "sbatch").write_text(f'#!/bin/bash\necho "$*" >> {calls}\necho 901\n')
    (bin_dir / "sbatch").chmod(0o755)
    max_allocations = text.split("\nMAX_ALLOCATIONS=", 1)[1].split("\n", 1)[0]
    body = ("set -uo pipefail\nlog() { echo \"$*\"; }\n" + backend_env(text)
            + function("job_failure") + function("submit_after") + function("submit_successor")
            + f"SERVERS_HEALTHY=1 MAX_ALLOCATIONS="
            f"{max_allocations} JOB_SCRIPT=/run/auxiliary/judge/judge.sbatch\nsubmit_successor\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "MODEL_DIR": str(folder),
           "RUN_DIR": str(tmp_path / "run"), "MODEL_KEY": "judge-judge",
           "SLURM_JOB_ID": str(700 + allocations - 1), "HPCEVAL_INVOCATION_ID": "inv"}
    subprocess.run(["bash", "-c", body], env=env, check=True, capture_output=True, text=True)
    chain = folder / "jobs.chain"
    return (calls.read_text().splitlines() if calls.exists() else [],
            chain.read_text() if chain.exists() else "")


def test_a_judge_capped_by_the_partition_continues_in_a_successor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21, defect 1: the partition's MaxTime (12 h) is below execution.max_walltime
    (72 h): the judge job asks for 12 h and, at its walltime, submits its successor, as a
    model's job does; none once the sweep is done, none past max_walltime, and the successor
    is the judge job status, kill and resume follow (never one the aggregation waits for)."""
    monkeypatch.setattr("hpceval.backends.slurm.partitions.partition_max_minutes", lambda _p: 720)
    models = sweep_models(tmp_path)
    resolved = dataclasses.replace(models[0][1], spec=dataclasses.replace(
        models[0][1].spec, execution=dataclasses.replace(
            models[0][1].spec.execution, max_walltime="72:00:00")))
    text = render_judge_job(resolved, "judge", context(resolved))
    assert "#SBATCH --time=720 " in text and "\nMAX_ALLOCATIONS=6\n" in text
    assert "#SBATCH --no-requeue" in text  # node failures: a resume submits a new judge
    # a successor that starts once the sweep is done ends before it loads anything
    assert text.index('if [ -e "$MODEL_DIR/stop" ]; then') < text.index("launch_server 0 head")
    sbatch, chain = successor_call(text, tmp_path, stop=False)
    assert sbatch == ["--parsable --dependency=afterany:700 /run/auxiliary/judge/judge.sbatch"]
    assert chain == "901\n"
    assert successor_call(text, tmp_path, stop=True) == ([], "")  # the sweep is done
    assert successor_call(text, tmp_path, stop=False, allocations=6) == ([], "")  # 72 h used

    from hpceval.backends.base import JobEntry
    from hpceval.runs.jobs import read_jobs
    from hpceval.runs.successors import unwaited_successors

    run_dir = tmp_path / "run"
    successor_call(text, tmp_path, stop=False)
    (run_dir / "run.json").write_text(json.dumps({
        "models": [{"key": f"model-{i}", "index": i} for i in range(3)],
        "auxiliary": [{"name": "judge"}]}))
    first = JobEntry("700", "slurm", "judge", (), False, 1.0, aux="judge")
    (run_dir / "jobs.json").write_text(json.dumps({"kind": "slurm", "chain": [
        JobEntry("699", "slurm", "main", (0, 1, 2), True, 1.0).to_json(), first.to_json()]}))
    jobs = read_jobs(run_dir)
    newest = jobs.judge("judge")
    assert newest is not None and (newest.id, newest.reason) == ("901", "auto-resume")
    assert "901" in jobs.ids and unwaited_successors(run_dir, "aggregate.waited") == []


def test_an_uncapped_judge_has_no_successor(tmp_path: Path) -> None:
    models = sweep_models(tmp_path)
    text = render_judge_job(models[0][1], "judge", context(models[0][1]))
    assert "submit_successor" not in text and "MAX_ALLOCATIONS" not in text


def test_a_judge_rendered_where_no_partition_is_seen_asks_for_one_allocation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hpc-admin-2 D1 (k): `render` on a machine where sinfo cannot be asked learned no limit
    and wrote the judge's `--time=72:00:00` (execution.max_walltime), above most sites'
    limits: the script, submitted as rendered, is refused or pends for ever. It now asks for
    execution.walltime (what one allocation of the site may take; submit checks it against
    the limits) and continues in successor jobs up to max_walltime."""
    monkeypatch.setattr("hpceval.backends.slurm.partitions.partition_info", lambda _p: None)
    models = sweep_models(tmp_path)
    resolved = dataclasses.replace(models[0][1], spec=dataclasses.replace(
        models[0][1].spec, execution=dataclasses.replace(
            models[0][1].spec.execution, walltime="12:00:00", max_walltime="72:00:00")))
    text = render_judge_job(resolved, "judge", context(resolved))
    assert "#SBATCH --time=12:00:00 " in text and "#SBATCH --time=72:00:00" not in text
    assert "submit_successor" in text and "\nMAX_ALLOCATIONS=6\n" in text
