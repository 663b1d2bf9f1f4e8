"""The rules of a sweep's judge job (auxiliary deployments with scope: sweep), applied by the
loader before anything is rendered: config/judges.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_sinfo import fake_sinfo_on_path

from hpceval.config import ConfigError, load_run
from hpceval.config.judges import judge_issues

JUDGE: dict[str, Any] = {"type": "vllm", "checkpoint_path": "/models/judge-72b",
                         "served_model_name": "judge", "tensor_parallel_size": 8,
                         "runtime": "host", "scope": "sweep"}


def load(tmp_path: Path, judge: dict[str, Any], models: int = 3,
         execution: dict[str, Any] | None = None, per_model: dict[str, Any] | None = None
         ) -> list[Any]:
    run: dict[str, Any] = {
        "defaults": [{"execution": "slurm"}],
        "execution": {"output_dir": "/runs", **(execution or {})},
        "deployment": {"type": "vllm", "runtime": "host", "tensor_parallel_size": 8},
        "evaluation": {"tasks": ["ifeval"]},
        "auxiliary_deployments": {"judge": judge}}
    entries: list[Any] = [f"/m/model-{i}" for i in range(models)]
    if per_model:
        entries[-1] = {"name": "odd", "checkpoint_path": "/m/odd", **per_model}
    if models > 1:
        run["models"] = entries
    else:
        run["deployment"].update(checkpoint_path="/m/solo", served_model_name="solo")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return load_run(path, check_environment=False)


def refused(tmp_path: Path, judge: dict[str, Any], **kw: Any) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, judge, **kw)
    return [(i.path, i.message) for i in err.value.issues]


UNLIMITED = '#!/bin/bash\necho "gpu* infinite"\n'  # sinfo: a default partition, no MaxTime


def test_a_valid_sweep_judge_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_sinfo_on_path(tmp_path / "bin", UNLIMITED, monkeypatch):  # not this machine's
        runs = load(tmp_path, JUDGE)
        built, issues = judge_issues(runs[0].spec, "judge", "inv-1")
    assert len(runs) == 3
    assert issues == [] and built is not None
    spec, layout = built
    assert spec.execution.job_name == "hpceval-inv-1-judge-judge"
    assert spec.execution.walltime == runs[0].spec.execution.max_walltime
    assert spec.execution.auto_resume is False and spec.evaluation.tasks == []
    assert (layout.instances, layout.gpus_per_instance) == (1, 8)


@pytest.mark.parametrize(("change", "kw", "path", "words"), [
    ({}, {"execution": {"type": "local"}}, "auxiliary_deployments.judge.scope",
     "one job at a time"),
    ({"tensor_parallel_size": 3}, {}, "auxiliary_deployments.judge (its own job): deployment",
     "idle"),
    # the judge deployment's own keys: aux_layout's rules, named per model
    ({"num_nodes": 0}, {}, "models[0]: auxiliary_deployments.judge.num_nodes",
     "job of its own"),
    ({"checkpoint_path": None}, {}, "models[0]: auxiliary_deployments.judge.checkpoint_path",
     "exactly one"),
])
def test_the_loader_refuses_what_the_judge_job_cannot_be(
        tmp_path: Path, change: dict[str, Any], kw: dict[str, Any],
        path: str, words: str) -> None:
    issues = refused(tmp_path, {**JUDGE, **change}, **kw)
    assert any(p == path and words in m for p, m in issues), issues


def test_models_must_share_their_sweep_judge(tmp_path: Path) -> None:
    """A models: entry cannot set auxiliary_deployments (the run file's is every model's);
    configs built by hand (the API) can, and are refused naming the model."""
    import dataclasses

    from hpceval.config.judges import sweep_judge_issues

    runs = load(tmp_path, JUDGE, models=2)
    other = dataclasses.replace(runs[0].spec.auxiliary_deployments["judge"],
                                served_model_name="other")
    odd = dataclasses.replace(runs[1].spec, auxiliary_deployments={"judge": other})
    issues = sweep_judge_issues([("a", runs[0].spec), ("b", odd)])
    assert [(i.path, i.fix) for i in issues] == [
        ("models.b.auxiliary_deployments.judge", "declare it once, outside models:")]
    assert sweep_judge_issues([("a", runs[0].spec), ("b", runs[1].spec)]) == []


def test_render_prints_the_judge_job(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from hpceval.cli.main import cli

    load(tmp_path, JUDGE)  # writes run.yaml (and loads it)
    out = CliRunner().invoke(cli, ["render", str(tmp_path / "run.yaml")])
    assert out.exit_code == 0, out.output
    names = [line for line in out.output.splitlines() if line.startswith("# ===== ")]
    assert names == ["# ===== sweep.sbatch =====",
                     *[f"# ===== models/model-{i}/job.sh =====" for i in range(3)],
                     "# ===== auxiliary/judge/judge.sbatch =====",
                     # the harness images are pulled ahead, by the run's CPU pull job
                     "# ===== pull.sbatch =====",
                     "# ===== aggregate.sbatch ====="]
    assert "#SBATCH --job-name=hpceval-" in out.output and "-judge-judge" in out.output
    refused = CliRunner().invoke(cli, ["render", str(tmp_path / "run.yaml"),
                                       "-o", "auxiliary_deployments.judge.num_nodes=0"])
    assert refused.exit_code == 2
    assert "auxiliary_deployments.judge.num_nodes" in refused.output


def test_one_model_serves_its_sweep_judge_in_its_job(tmp_path: Path) -> None:
    """A run of one model has no sweep to share the judge with (and no aggregation step to end
    a judge job): the loader serves it in the model's job; no judge job is rendered."""
    from hpceval.runs.rundir import prepare_run

    (run,) = load(tmp_path, JUDGE, models=1)
    assert run.spec.auxiliary_deployments["judge"].scope == "job"
    assert prepare_run([run]).judges == {}


def test_an_external_judge_needs_no_job(tmp_path: Path) -> None:
    from hpceval.runs.rundir import prepare_run

    runs = load(tmp_path, {"type": "none", "url": "http://judge.example/v1",
                           "model_id": "judge", "scope": "sweep"})
    assert prepare_run(runs).judges == {}
