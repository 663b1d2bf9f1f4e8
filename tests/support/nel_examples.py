"""The NeMo Evaluator launcher examples (tests/data/nel_examples, see its README), as the
tests in tests/config/test_nel_examples*.py pin them: what each file's header tells users to
pass with ``-o``, the two outcomes (it renders with the launcher's meaning, or is refused with
exit 2 and words that say what hpceval does not support and what to do), and the checks the
example families share.

A refused file may also be pinned with the overrides its message asks for ("then"): the fix
the message names must work.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpceval.cli.main import cli
from hpceval.config import ResolvedConfig, load_config, yamlio
from hpceval.tasks import load_catalogue
from support import TESTS

EXAMPLES = TESTS / "data" / "nel_examples"

# What the headers say, word for word (checked below against each file's header).
SLURM_HEADER = ("execution.hostname=my-cluster.com",
                "execution.output_dir=/absolute/path/on/cluster",
                "execution.account=my-account",
                "++evaluation.nemo_evaluator_config.config.params.limit_samples=10")
NIM_HEADER = ("execution.hostname=my-cluster.com", "execution.output_dir=/path/on/cluster",
              "execution.account=my-account",
              "++evaluation.nemo_evaluator_config.config.params.limit_samples=10")
DOCUMENTED: dict[str, tuple[str, ...]] = {
    "lepton_basic.yaml": (), "lepton_nim.yaml": (), "lepton_vllm.yaml": (),
    "local_advanced_adapters.yaml": (), "local_auto_export.yaml": (), "local_basic.yaml": (),
    "local_extra_params.yaml": (), "local_nim.yaml": (), "local_reasoning.yaml": (),
    "local_safety.yaml": (), "local_tools.yaml": (), "local_vllm_logprobs.yaml": (),
    "nemotron/local_nvidia-nemotron-3-nano-30b-a3b-base.yaml": (),
    "nemotron/local_nvidia_nemotron_3_nano_30b_a3_tools.yaml": (),
    "nemotron/local_nvidia_nemotron_3_nano_30b_a3b.yaml": (),
    "nemotron/local_qwen3-30b-a3b-base.yaml": (),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b-base.yaml": (),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b.yaml": (),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b_low_budget.yaml": (),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b_tools.yaml": (),
    "nemotron/slurm_nvidia_nemotron_3_nano_30b_a3b_nvfp4.yaml": (),  # its header has none
    "slurm_nemotron_benchmarks.yaml": SLURM_HEADER,
    "slurm_nim.yaml": NIM_HEADER,
    "slurm_sglang_auto_export.yaml": SLURM_HEADER,
    "slurm_vllm_advanced_hf_caching.yaml": SLURM_HEADER,
    "slurm_vllm_auxiliary_judge.yaml": SLURM_HEADER,
    "slurm_vllm_basic.yaml": SLURM_HEADER,
    "slurm_vllm_checkpoint_path.yaml": SLURM_HEADER,
    "slurm_vllm_multinode_dp.yaml": SLURM_HEADER,
    "slurm_vllm_multinode_dp_haproxy.yaml": SLURM_HEADER,
    "slurm_vllm_multinode_multiinstance_ray_tp_pp.yaml": SLURM_HEADER,
    "slurm_vllm_multinode_ray_tp_pp.yaml": SLURM_HEADER,
}

Check = Callable[[ResolvedConfig, str, Path], None]


@dataclass(frozen=True)
class Renders:
    tasks: tuple[str, ...] | None  # as the catalogue resolves them; None: the file's own names
    check: Check | None = None
    notes: tuple[str, ...] = ()  # what the user is told about keys without a counterpart


@dataclass(frozen=True)
class Refused:
    says: tuple[str, ...]
    then: tuple[tuple[str, ...], Renders | Refused] | None = field(default=None)


def params(r: ResolvedConfig, **expected: object) -> None:
    for task in r.spec.evaluation.tasks:
        got = {k: getattr(task.params, k) for k in expected}
        assert got == expected, (task.name, got)


def docker(r: ResolvedConfig, script: str) -> None:
    """In containers as NEL's local executor runs them: the server and the harness."""
    assert r.spec.execution.container_runtime == "docker"
    server = script.split("launch_server 0 head")[1].split("vllm serve")[0]
    assert "docker run" in server and "--network=host" in server
    assert "endpoint, in docker)" in script  # the harness


def chains(named: dict[str, dict[str, object]], others: dict[str, object] | None = None,
           shared: dict[str, object] | None = None) -> Check:
    """NEL's one adapter per task: each named task's own interceptors (the keys given), the
    others' ``others`` (None: the run's chain, ``shared``); every task with a chain of its own
    asks the proxy under /task/<its key>/, and the proxy is given those chains."""
    def check(r: ResolvedConfig, script: str, cwd: Path) -> None:
        run = r.spec.evaluation.interceptors
        for key, value in (shared or {}).items():
            assert getattr(run, key) == value, key
        for task, rt in zip(r.spec.evaluation.tasks, r.tasks, strict=True):
            rules = named.get(task.name, others)
            own = r.spec.evaluation.own_chain(task) is not None
            routed = f"  endpoint_urls /task/{rt.key}  # its own interceptors\n" in script
            assert (own, routed) == (rules is not None, rules is not None), task.name
            for key, value in (rules or {}).items():
                assert getattr(task.interceptors, key) == value, (task.name, key)
        assert ("--task-interceptors=" in script) == bool(named or others)
    return check


OWN_CHAINS = "adapter_configs became their own interceptors"
# NEL's local executor runs the server and harnesses with docker: so does the local profile
# (container_runtime: auto), here on a machine where neither docker nor podman is found
DOCKER_NOTE = "execution.container_runtime: auto chose docker (neither docker nor podman found"
NIM = Refused(("NIM deployments are out of scope for hpceval",
               "point target.api_endpoint.url at it with deployment: none"))


def auto_export(r: ResolvedConfig, script: str, cwd: Path) -> None:
    from hpceval.runs.rundir import prepare_run

    ex = r.spec.export
    assert ex.destinations == ["mlflow"] and ex.mlflow.tracking_uri == MLFLOW_URI
    assert ex.mlflow.experiment_name == "nemo-evaluator-launcher"
    run = prepare_run(r, invocation_id="inv-0123456789abcdef", python="/py")
    after = "--mlflow-tracking-uri=" + MLFLOW_URI
    if r.spec.execution.type == "slurm":  # a dependent job, submitted after the main one
        assert run.export is not None and after in run.export
    else:  # the local runner exports after the last model
        assert run.export is None and after in run.scripts["local.sh"]


MLFLOW_URI = "http://mlflow.example:5000"
EXPORT_NOTES = ("export.mlflow.log_metrics is ignored: every metric of every task is logged",
                "export.mlflow.tags is ignored")
EXPORT = Refused(("export.mlflow.tracking_uri: MISSING value",),
                 then=((f"export.mlflow.tracking_uri={MLFLOW_URI}",),
                       Renders(("simple_evals.gpqa_diamond",), auto_export, EXPORT_NOTES)))


def run_render(name: str, overrides: tuple[str, ...]) -> tuple[int, str, str]:
    args = ["render", str(EXAMPLES / name)]
    for o in overrides:
        args += ["-o", o]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


def check_example(name: str, overrides: tuple[str, ...], outcome: Renders | Refused,
                  cwd: Path) -> None:
    code, script, err = run_render(name, overrides)
    assert "Traceback" not in err
    if isinstance(outcome, Refused):
        assert code == 2, (name, err[-2000:])
        assert "#SBATCH" not in script
        for words in outcome.says:
            assert words in err, (name, words, err)
        if outcome.then is not None:
            check_example(name, (*overrides, *outcome.then[0]), outcome.then[1], cwd)
        return
    assert code == 0, (name, err)
    for leftover in ("???", "${oc.", "${deployment."):
        assert leftover not in script, (name, leftover)
    r = load_config(EXAMPLES / name, list(overrides), check_environment=False)
    catalogue = load_catalogue()
    resolved = tuple(catalogue.resolve(t.name).task.qualified_name
                     for t in r.spec.evaluation.tasks)
    if outcome.tasks is None:  # long lists: no task of the file is lost or renamed
        written = yamlio.read(EXAMPLES / name)["evaluation"]["tasks"]
        assert [t.name for t in r.spec.evaluation.tasks] == [t["name"] for t in written]
    else:
        assert resolved == outcome.tasks
    for task in resolved:
        assert task in script
    for words in outcome.notes:
        assert words in err, (name, words, err)
    if outcome.check is not None:
        outcome.check(r, script, cwd)


def example_outcome(name: str, outcome: Renders | Refused, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One example with its documented overrides, from a fresh folder (relative output_dir and
    bind sources land there)."""
    monkeypatch.chdir(tmp_path)
    # the local profile counts this machine's GPUs: here a machine where none can be counted
    monkeypatch.setattr("hpceval.config.auto.count_gpus", lambda env, which=None: None)
    monkeypatch.setattr("hpceval.config.auto.find_program", lambda name: None)
    check_example(name, DOCUMENTED[name], outcome, Path(os.getcwd()))
