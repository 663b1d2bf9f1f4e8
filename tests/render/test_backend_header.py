"""The job script's header is the backend's (issue 33): render writes the lines the run's
backend gives, so the local backend's scripts carry none and another scheduler's backend
supplies its own directives without render knowing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from render_helpers import RenderFn, context, resolve

from hpceval.backends import Backend, CpuJob, backend_for
from hpceval.backends.local import LocalBackend
from hpceval.backends.slurm.backend import SlurmBackend
from hpceval.backends.slurm.header import header_lines
from hpceval.backends.views import ExecutionView, JobView, RunView
from hpceval.config.schema import ExecutionSpec
from hpceval.contract import WATCH_LOG_DIR
from hpceval.records import Role

RUN: dict[str, Any] = {"deployment": {"type": "vllm", "checkpoint_path": "/models/m",
                                      "served_model_name": "m", "tensor_parallel_size": 1},
                       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}
LOCAL = ["execution.gpus_per_node=1", "deployment.runtime=host"]
TICK: dict[str, Any] = {"watch_dir": "/out/w", "watch_id": "w-1", "python": "/py",
                        "checkpoints": "/ckpt", "interval_s": 600}


class PbsBackend(LocalBackend):
    """A fake scheduler's backend: the local backend's behaviour, a header of its own."""

    def header(self, spec: RunView, ctx: JobView, log_dir: str, nodes: int, *,
               role: Role = Role.MAIN) -> list[str]:
        return [f"#PBS -N {ctx.model_key}", f"#PBS -l nodes={nodes}",
                f"#PBS -o {log_dir}/{self.log_name(str(role))}"]

    def cpu_header(self, ex: ExecutionView, job: CpuJob) -> list[str]:
        return [f"#PBS -N {job.name}", f"#PBS -l walltime={job.minutes}:00",
                f"#PBS -o {job.log_dir}/{self.log_name(job.role)}"]

    def log_name(self, role: str) -> str:
        return f"{role}.o$PBS_JOBID"


def test_local_backend_has_no_header(tmp_path: Path) -> None:
    resolved = resolve("local", RUN, tmp_path, LOCAL)
    backend = backend_for("local")
    assert backend.header(resolved.spec, context(resolved), "/out", 1) == []
    assert backend.header(resolved.spec, context(resolved), "/out", 1, role=Role.JUDGE) == []
    assert backend.cpu_header(resolved.spec.execution,
                              CpuJob("aggregate", "n", "/out", 15, "", "")) == []
    assert backend.spec_issues(ExecutionSpec(sbatch_extra_flags={"--bad": "x\ny"}),
                               ask=True) == []


def test_local_scripts_carry_no_directive(render: RenderFn, tmp_path: Path) -> None:
    from hpceval.render.sweep import render_aggregate, render_export

    assert "#SBATCH" not in render("local", RUN, LOCAL)
    resolved = resolve("local", RUN, tmp_path, LOCAL)
    for script in (render_aggregate(resolved, context(resolved)),
                   render_export(resolved, context(resolved))):
        assert "#SBATCH" not in script and script.startswith("#!/bin/bash")


def test_slurm_backend_header_is_header_lines(tmp_path: Path) -> None:
    resolved = resolve("slurm", RUN, tmp_path)
    ctx = context(resolved)
    lines = SlurmBackend().header(resolved.spec, ctx, "/runs/x", 2)
    assert lines == [line.text() for line in header_lines(resolved.spec, ctx, "/runs/x", 2)]
    assert any(line.startswith("#SBATCH --nodes=2 ") for line in lines)
    judge = SlurmBackend().header(resolved.spec, ctx, "/runs/x", 2, role=Role.JUDGE)
    assert any("the judge's own nodes" in line for line in judge)
    assert SlurmBackend().log_name("aggregate") == "aggregate-%j.log"


@pytest.fixture
def pbs(monkeypatch: pytest.MonkeyPatch) -> Backend:
    """Every render lookup of the slurm type answers the fake backend (render/context.py's
    job_backend is render's one lookup)."""
    fake = PbsBackend()

    def lookup(kind: str, **_: Any) -> Backend:
        return fake if kind == "slurm" else backend_for(kind)

    monkeypatch.setattr("hpceval.render.context.backend_for", lookup)
    return fake


def test_render_writes_the_backends_header(pbs: Backend, render: RenderFn,
                                           tmp_path: Path) -> None:
    from hpceval.render.sweep import render_aggregate
    from hpceval.render.watch import render_tick

    script = render("slurm", RUN, ["execution.nodes=2"])
    assert "#SBATCH" not in script
    head = [line for line in script.splitlines() if line.startswith("#PBS")]
    assert head == ["#PBS -N demo-model", "#PBS -l nodes=2",
                    "#PBS -o /home/alice/hpceval-runs/inv-0123456789abcdef/models/demo-model/"
                    "main.o$PBS_JOBID"]
    resolved = resolve("slurm", RUN, tmp_path)
    aggregate = render_aggregate(resolved, context(resolved))
    assert "#PBS -N hpceval-aggregate-inv-0123456789abcdef" in aggregate
    assert "#PBS -l walltime=15:00" in aggregate and "#SBATCH" not in aggregate
    tick = render_tick(resolved, **TICK)
    assert f"#PBS -o /out/w/{WATCH_LOG_DIR}/tick.o$PBS_JOBID" in tick.splitlines()
    assert "#SBATCH" not in tick
