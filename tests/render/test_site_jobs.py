"""What real sites do to a job (issue 21): CPU-only jobs on their own partition (defect 10) and
HPCEVAL_PYTHON checked before any server starts (defect 7)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from render_helpers import RenderFn, resolve

from hpceval.backends.slurm.header import HeaderLine, cpu_job_lines
from hpceval.config.errors import ConfigError
from hpceval.config.schema import ExecutionSpec

RUN: dict[str, Any] = {"deployment": {"type": "vllm", "checkpoint_path": "/models/m",
                                      "served_model_name": "m", "tensor_parallel_size": 8},
                       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}


def partitions(ex: ExecutionSpec) -> list[str | None]:
    lines = cpu_job_lines(ex, HeaderLine("job-name", "x"), "/out/x.log", 10, "", "")
    return [line.value for line in lines if line.flag == "partition"]


def test_cpu_only_jobs_use_cpu_partition() -> None:
    assert partitions(ExecutionSpec(partition="gpu", cpu_partition="cpu")) == ["cpu"]


def test_cpu_partition_defaults_to_partition() -> None:
    assert partitions(ExecutionSpec(partition="gpu")) == ["gpu"]
    assert partitions(ExecutionSpec()) == []


def test_cpu_partition_reaches_the_cpu_jobs_through_the_loader(tmp_path: Path) -> None:
    # hpc-admin-2 N1 / D15: the NeMo compatibility layer dropped the key from every layer, so
    # a hand-built ExecutionSpec was the only way a CPU job ever reached the CPU partition
    from render_helpers import context

    from hpceval.render.sweep import render_aggregate
    from hpceval.render.watch import render_tick

    resolved = resolve("slurm", RUN, tmp_path, ["execution.cpu_partition=cpu"])
    assert resolved.spec.execution.cpu_partition == "cpu"
    assert not any("cpu_partition" in note for note in resolved.composed.notes)
    aggregate = render_aggregate(resolved, context(resolved))
    tick = render_tick(resolved, watch_dir="/out/w", watch_id="w-1", python="/py",
                       checkpoints="/ckpt", interval_s=600)
    for script in (aggregate, tick):
        assert [line.split()[1] for line in script.splitlines()
                if line.startswith("#SBATCH --partition")] == ["--partition=cpu"], script


def test_a_python_that_cannot_run_hpceval_fails_the_job_before_any_server(
        render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", RUN)
    start = script.index("# The in-job helpers (proxy, progress, collection) run with")
    assert start < script.index("launch_server 0 head")  # before any server starts
    check = script[start:script.index("\nfi\n", start) + 4]
    job_failure = script[script.index("job_failure() {"):]
    job_failure = job_failure[:job_failure.index("\n}\n") + 3]
    body = ("log() { echo \"$*\"; }\n" + job_failure.replace("{{", "") + check
            + "echo went-on\n")
    env = {"PATH": os.environ["PATH"], "MODEL_DIR": str(tmp_path),
           "HPCEVAL_PYTHON": str(tmp_path / "login-local/venv/bin/python")}
    proc = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1 and "went-on" not in proc.stdout
    failure = (tmp_path / "job-failure").read_text()
    assert "login-local/venv/bin/python cannot run hpceval" in failure
    assert "No such file or directory" in failure
    # a Python that has hpceval passes
    ok = subprocess.run(["bash", "-c", body], env={**env, "HPCEVAL_PYTHON": sys.executable},
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "went-on" in ok.stdout


def fake_module(tmp_path: Path, broken: str) -> Path:
    """A site's `module` as Lmod 9.2.4's reads LD_PRELOAD unset (a set -u error), loading
    anything but ``broken``."""
    init = tmp_path / "lmod.sh"
    init.write_text('module() { : "$LD_PRELOAD"; [ "$2" != ' + broken + ' ] && '
                    'echo "loaded $2" >> "$MODEL_DIR/loads"; }\n')
    return init


def run_preamble(render: RenderFn, tmp_path: Path, modules: list[str], broken: str
                 ) -> subprocess.CompletedProcess[str]:
    init = fake_module(tmp_path, broken)
    overrides = [f"execution.module_init=[source {init}]",
                 "execution.modules=[" + ",".join(modules) + "]",
                 "execution.pre_commands=[echo pre-commands-ran]"]
    script = render("slurm", RUN, overrides)
    preamble = script[script.index("set -uo pipefail"):script.index("# --- nodes and ports")]
    preamble = preamble.replace('MODEL_DIR="$RUN_DIR/models/$MODEL_KEY"', f"MODEL_DIR={tmp_path}")
    return subprocess.run(["bash", "-c", preamble + "echo went-on\n"], capture_output=True,
                          text=True, check=False, env={"PATH": os.environ["PATH"]})


def test_modules_load_after_module_init_without_set_u(render: RenderFn, tmp_path: Path) -> None:
    proc = run_preamble(render, tmp_path, ["apptainer/1.3.4", "cuda/12.4"], broken="none")
    assert proc.returncode == 0 and "went-on" in proc.stdout, proc.stderr
    assert (tmp_path / "loads").read_text() == "loaded apptainer/1.3.4\nloaded cuda/12.4\n"
    assert "pre-commands-ran" in proc.stdout


def test_a_failed_module_load_fails_the_job_naming_the_module(render: RenderFn,
                                                              tmp_path: Path) -> None:
    proc = run_preamble(render, tmp_path, ["apptainer/1.3.4", "cuda/12.4"], broken="cuda/12.4")
    assert proc.returncode == 1 and "went-on" not in proc.stdout
    failure = (tmp_path / "job-failure").read_text()
    assert failure.startswith("module load cuda/12.4 failed on ")
    assert "module_init" in failure and "pre-commands-ran" not in proc.stdout


def header(script: str) -> list[str]:
    return [line.split("#", 2)[1].strip() for line in script.splitlines()
            if line.startswith("#SBATCH")]


def test_a_gpu_job_without_cpus_or_memory_gets_them_per_gpu(render: RenderFn) -> None:
    lines = header(render("slurm", RUN))
    assert "SBATCH --cpus-per-gpu=8" in lines and "SBATCH --mem-per-gpu=64G" in lines
    assert not any(x.startswith(("SBATCH --cpus-per-task", "SBATCH --mem=")) for x in lines)


def test_explicit_cpus_memory_or_whole_nodes_win(render: RenderFn) -> None:
    lines = header(render("slurm", RUN, ["execution.cpus_per_task=64", "execution.mem=480G"]))
    assert "SBATCH --cpus-per-task=64" in lines and "SBATCH --mem=480G" in lines
    assert not any("per-gpu" in x for x in lines)
    exclusive = header(render("slurm", RUN, ["execution.exclusive=true"]))
    assert "SBATCH --exclusive" in exclusive and "SBATCH --mem=0" in exclusive
    assert "SBATCH --cpus-per-gpu=8" in exclusive
    off = header(render("slurm", RUN, ["execution.cpus_per_gpu=null",
                                       "execution.mem_per_gpu=null"]))
    assert not any("per-gpu" in x or x.startswith("SBATCH --mem") for x in off)


def test_no_per_gpu_request_without_gpus(render: RenderFn) -> None:
    external = {"deployment": {"type": "none"}, "target": {"api_endpoint": {
        "url": "https://api.example.org/v1/chat/completions", "model_id": "m"}},
        "evaluation": {"tasks": [{"name": "boxed_chat"}]}}
    lines = header(render("slurm", external, ["execution.gpus_per_node=0"]))
    assert not any("per-gpu" in x for x in lines)


def test_an_image_of_another_vllm_release_is_noted(tmp_path: Path) -> None:
    old = resolve("slurm", {**RUN, "deployment": {
        **RUN["deployment"], "image": "docker://vllm/vllm-openai:v0.15.1"}}, tmp_path)
    notes = [n for n in old.composed.notes if "deployment.image is vLLM" in n]
    assert len(notes) == 1 and "vLLM 0.15.1" in notes[0] and "0.32.0's parser" in notes[0]
    staged = resolve("slurm", {**RUN, "deployment": {
        **RUN["deployment"], "image": "/sif/vllm-openai_v0.13.0.sif"}}, tmp_path)
    assert any("vLLM 0.13.0" in n for n in staged.composed.notes)
    same = resolve("slurm", {**RUN, "deployment": {
        **RUN["deployment"], "image": "docker://vllm/vllm-openai:v0.32.0"}}, tmp_path)
    assert not any("deployment.image is vLLM" in n for n in same.composed.notes)


def test_an_image_without_a_rendered_flag_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        resolve("slurm", {**RUN, "deployment": {
            **RUN["deployment"], "image": "docker://vllm/vllm-openai:v0.9.2"}}, tmp_path)
    text = str(err.value)
    assert "deployment.image" in text and "--enable-tokenizer-info-endpoint" in text
    assert "0.10.0 or later" in text


MULTI_NODE = ["execution.nodes=2", "execution.gpus_per_node=4"]


def test_a_multi_node_image_without_the_native_flags_is_refused(tmp_path: Path) -> None:
    """Defect 11: native multi-node (--nnodes ... --headless) came with vLLM 0.11.1; an older
    image is refused for the shape that renders those flags, naming them and the release."""
    def run(tag: str, **dep: Any) -> dict[str, Any]:
        return {**RUN, "deployment": {**RUN["deployment"], **dep,
                                      "image": f"docker://vllm/vllm-openai:{tag}"}}

    with pytest.raises(ConfigError) as err:
        resolve("slurm", run("v0.11.0"), tmp_path, MULTI_NODE)
    text = str(err.value)
    assert "deployment.image" in text and "vLLM 0.11.0 has no --nnodes" in text
    assert "--master-addr (since vLLM 0.11.1)" in text and "over 2 nodes" in text
    assert "0.11.1 or later" in text
    # one node: no multi-node flag is rendered, the image is only noted
    one = resolve("slurm", run("v0.11.0"), tmp_path, ["execution.gpus_per_node=8"])
    assert any("deployment.image is vLLM 0.11.0" in n for n in one.composed.notes)
    # Ray renders none of them either
    ray = resolve("slurm", run("v0.11.0", multi_node_backend="ray"), tmp_path, MULTI_NODE)
    assert ray.layout.nodes_per_instance == 2
    # NEL's multi-node example's v0.15.1 has them all (checked in that release's own code)
    assert resolve("slurm", run("v0.15.1"), tmp_path, MULTI_NODE).layout.nodes_per_instance == 2
    with pytest.raises(ConfigError) as err:
        resolve("slurm", run("v0.8.5"), tmp_path, MULTI_NODE)
    assert "--headless (since vLLM 0.9.0)" in str(err.value)
    assert "--enable-tokenizer-info-endpoint (since vLLM 0.10.0)" in str(err.value)


def test_a_judge_image_is_checked_for_its_own_shape(tmp_path: Path) -> None:
    judge = {"type": "vllm", "image": "docker://vllm/vllm-openai:v0.11.0",
             "checkpoint_path": "/models/j", "served_model_name": "j",
             "tensor_parallel_size": 8, "num_nodes": 2}
    with pytest.raises(ConfigError) as err:
        resolve("slurm", {**RUN, "auxiliary_deployments": {"judge": judge}}, tmp_path,
                ["execution.gpus_per_node=4", "execution.nodes=2"])
    assert "auxiliary_deployments.judge.image" in str(err.value)
    assert "--nnodes" in str(err.value)


def test_module_init_is_sourced_without_set_u(render: RenderFn, tmp_path: Path) -> None:
    # Lmod's init reads variables that may be unset (__lmod_vx, TACC/Lmod #384; envmodules
    # #151): sourced under set -u it ends the job before any module is loaded.
    init = tmp_path / "lmod-init.sh"
    init.write_text(': "$__lmod_vx"\nmodule() { echo "loaded $2" >> "$MODEL_DIR/loads"; }\n')
    script = render("slurm", RUN, [f"execution.module_init=[source {init}]",
                                   "execution.modules=[cuda/12.4]"])
    preamble = script[script.index("set -uo pipefail"):script.index("# --- nodes and ports")]
    preamble = preamble.replace('MODEL_DIR="$RUN_DIR/models/$MODEL_KEY"', f"MODEL_DIR={tmp_path}")
    proc = subprocess.run(["bash", "-c", preamble + 'echo "went-on ${UNSET_AFTER-strict}"\n'],
                          capture_output=True, text=True, check=False,
                          env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0 and "went-on strict" in proc.stdout, proc.stderr
    assert (tmp_path / "loads").read_text() == "loaded cuda/12.4\n"
    # strict mode is back for the job itself
    assert "set -u\n" in preamble[preamble.index("source "):]


GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def srun_commands(script: str) -> list[str]:
    """Every srun command line of a script (continuation lines joined), comments left out."""
    lines, commands = script.splitlines(), []
    for i, line in enumerate(lines):
        code = line.split("#", 1)[0] if line.lstrip().startswith("#") else line
        if not re.search(r"(^|\s)srun(\s|$)", code) or "log " in code:
            continue
        command = line
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        commands.append(command)
    return commands


def test_every_step_a_job_starts_passes_the_whole_environment() -> None:
    # SBATCH_EXPORT=NONE (a site's or a user's default) sets SLURM_EXPORT_ENV=NONE in the job,
    # and a bare srun then starts its step with an empty environment (hpc-admin-2 N3)
    seen = 0
    for path in sorted(GOLDEN.glob("*.sbatch")):
        for command in srun_commands(path.read_text()):
            seen += 1
            assert "--export=ALL" in command.split(), f"{path.name}: {command}"
    assert seen >= 30  # the server step of every Slurm shape, and pyxis's harness steps
