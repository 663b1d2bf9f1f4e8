"""The run's pull job asks for the CPUs its conversion uses: apptainer pull (and enroot import)
turn the image's layers into one SquashFS file with mksquashfs, which compresses on every CPU
it is given, so the one CPU of the other CPU jobs made a multi-GB conversion crawl."""

from __future__ import annotations

from typing import Any

import pytest
from render_helpers import RenderFn

MODEL = {"type": "vllm", "checkpoint_path": "/models/m", "served_model_name": "m",
         "image": "docker://vllm/vllm-openai:v0.32.0"}
RUN: dict[str, Any] = {"deployment": MODEL, "evaluation": {"tasks": [{"name": "boxed_chat"}]}}


def sbatch(script: str, flag: str) -> list[str]:
    """The values of `#SBATCH --flag=...` lines, without their comments."""
    return [line.split("=", 1)[1].split()[0] for line in script.splitlines()
            if line.startswith(f"#SBATCH --{flag}=")]


@pytest.mark.parametrize("runtime", ["apptainer", "pyxis"])
def test_the_pull_job_asks_for_several_cpus(render_pull: RenderFn, runtime: str) -> None:
    script = render_pull("slurm", RUN, [f"execution.container_runtime={runtime}",
                                        "execution.cpu_partition=cpu"])
    assert sbatch(script, "cpus-per-task") == ["4"]
    assert sbatch(script, "partition") == ["cpu"]  # on the CPU partition, no GPU
    assert "mksquashfs" in next(line for line in script.splitlines()
                                if line.startswith("#SBATCH --cpus-per-task="))
    assert not sbatch(script, "gpus-per-node") and not sbatch(script, "gres")


def test_a_cpu_jobs_time_fits_its_cpu_partitions_limit(
        render_pull: RenderFn, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pull job's hour is more than a CPU partition may give (the site in a box's `cpu`:
    its own QOS allows 45 minutes, DenyOnLimit): Slurm would refuse the whole submission. It
    asks for what the partition allows, and says why; a partition without a limit keeps the
    hour. The model's partition's limits do not count for it."""
    from hpceval.backends.slurm.partitions import Partition, TimeLimit

    limits = {"cpu": TimeLimit(45, "QOS cpujobs's MaxWall (partition cpu's own QOS)"),
              "gpu": TimeLimit(20, "the partition's MaxTime")}
    monkeypatch.setattr("hpceval.backends.slurm.partitions.partition_info",
                        lambda p: Partition(p, True, None))
    monkeypatch.setattr("hpceval.backends.slurm.partitions.time_limit",
                        lambda p, _q, _a=None: limits.get(p or ""))
    capped = render_pull("slurm", RUN, ["execution.cpu_partition=cpu",
                                        "execution.partition=gpu",
                                        "execution.walltime=00:20:00"])
    assert sbatch(capped, "time") == ["45"]
    assert "60 wanted, QOS cpujobs's MaxWall (partition cpu's own QOS) allows 45" in next(
        line for line in capped.splitlines() if line.startswith("#SBATCH --time="))
    free = render_pull("slurm", RUN, ["execution.cpu_partition=free"])
    assert sbatch(free, "time") == ["60"]
    # without a cpu_partition the CPU job shares the model's partition, and its limit
    shared = render_pull("slurm", RUN, ["execution.partition=gpu",
                                        "execution.walltime=00:20:00"])
    assert sbatch(shared, "time") == ["20"]
