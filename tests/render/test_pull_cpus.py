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
