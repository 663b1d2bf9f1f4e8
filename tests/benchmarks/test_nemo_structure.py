"""Guards the hpceval side of benchmarks/nemo_compare.py's structural figures.

The benchmark's configs are rendered here exactly as submit would render them (nothing is
written or submitted; NeMo Evaluator's launcher is not needed), and counted with the same code
the benchmark uses, so a rendering change that adds jobs, model loads or idle GPUs fails here.
"""

from __future__ import annotations

import base64
import importlib
from pathlib import Path

import pytest
from nemo_structure import hpceval_model_figures, hpceval_structure, nel_structure

HPCEVAL_CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs" / "hpceval"


def test_sweep_is_one_array_job_plus_aggregation_with_one_server_per_model() -> None:
    # and the CPU job that pulls the tasks' eval-factory images (docker://) before the array
    s = hpceval_structure(HPCEVAL_CONFIGS / "sweep3x5.yaml")
    assert (s.submit_sbatch, s.jobs, s.start_sbatch, s.server_starts) == (3, 5, 0, 3)
    assert (s.gpus_allocated, s.gpus_serving) == (24, 24)


def test_sweep_submit_makes_exactly_the_counted_sbatch_calls(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """The count above mirrors submit_prepared; check it against a real submit to a fake."""
    from support.slurm import FakeSlurm

    from hpceval.config import load_run
    from hpceval.runs.submit import submit_configs

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the run index lives under HOME
    configs = load_run(HPCEVAL_CONFIGS / "sweep3x5.yaml",
                       [f"execution.output_dir={tmp_path / 'runs'}"], check_environment=False)
    fake = FakeSlurm()
    # the configs name checkpoints on a cluster; preflight (which would refuse them) is not
    # what is counted here
    preflight = importlib.import_module("hpceval.staging.preflight")
    monkeypatch.setattr(preflight, "check_preflight", lambda *a, **k: None)
    submitted = submit_configs(configs, fake)
    assert len(fake.submits) == hpceval_structure(HPCEVAL_CONFIGS / "sweep3x5.yaml").submit_sbatch
    pull, array, aggregate = fake.submits
    assert (pull["script"].name, array["script"].name) == ("pull.sbatch", "sweep.sbatch")
    assert array["dependency"] == f"afterany:{pull['id']}"
    assert aggregate["dependency"] == f"afterany:{submitted.job_ids[0]}"
    assert len(submitted.models) == 3


def test_two_nodes_of_eight_gpus_with_tp2_use_all_sixteen_in_eight_instances() -> None:
    s = hpceval_structure(HPCEVAL_CONFIGS / "dp2x8.yaml")
    assert (s.server_starts, s.replicas) == (8, 8)
    assert (s.gpus_allocated, s.gpus_serving) == (16, 16)
    # one GPU job, after the CPU job that pulls the tasks' images
    assert (s.submit_sbatch, s.jobs, s.start_sbatch) == (2, 2, 0)


def test_seven_task_run_is_one_job_with_one_server() -> None:
    s = hpceval_structure(HPCEVAL_CONFIGS / "run7.yaml")
    # and the CPU job that pulls the tasks' images first
    assert (s.jobs, s.server_starts, s.gpus_allocated, s.gpus_serving) == (2, 1, 8, 8)


def test_counting_sees_a_layout_that_leaves_gpus_idle() -> None:
    """The counter is not hard-wired to 'everything used': TP=2 on 4 of 8 GPUs reads as 4."""
    serve = "\\\n  vllm serve m --tensor-parallel-size 2\n"
    script = ("#SBATCH --nodes=1\n#SBATCH --gpus-per-node=8\n"
              f'launch_server 0 head "${{NODES[0]}}" \'\' 0 2 {serve}'
              f'launch_server 1 head "${{NODES[0]}}" \'\' 2 2 {serve}')
    assert hpceval_model_figures(script) == (2, 4)


def test_launcher_counting_on_a_minimal_run_sub() -> None:
    """nel_structure reads the launcher's dry-run layout (shape of 0.2.6's output)."""
    cmd = base64.b64encode(b"vllm serve /checkpoint --tensor-parallel-size=2 "
                           b"--data-parallel-size=1 --port 8000").decode()
    run_sub = ("#!/bin/bash\n#SBATCH --nodes 2\n#SBATCH --gres gpu:8\n"
               "for ((g=0; g<2; g++)); do\n"
               f"    srun --mpi pmix --overlap --nodes 1 --ntasks 1 bash -c 'echo \"{cmd}\" | "
               "base64 -d > deployment_cmd.sh && bash deployment_cmd.sh' &\ndone\n"
               "sbatch --dependency=afternotok:$SLURM_JOB_ID $0 $SLURM_JOB_ID\n")
    out = "\x1b[36m=========== Task 0 =====================\x1b[0m\n" + run_sub
    s = nel_structure([out, out])
    assert (s.submit_sbatch, s.jobs, s.start_sbatch, s.server_starts) == (2, 2, 2, 4)
    assert (s.gpus_allocated, s.gpus_serving, s.replicas) == (32, 8, 4)
