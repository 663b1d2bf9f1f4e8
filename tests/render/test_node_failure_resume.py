"""A node failure resumes by itself (issue 25, item 4): the batch script dies with its node
(SIGKILL, no trap), so no successor can be submitted from inside; the job asks Slurm to rerun it
(#SBATCH --requeue), which Slurm does only for failures that are not the job's own (node failure,
an admin's requeue), never after a scancel, a timeout or a non-zero exit. The rerun is bounded by
execution.node_failure_retries and, as every successor, by execution.max_walltime."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from render_helpers import RenderFn

RUN: dict[str, Any] = {"deployment": {"type": "vllm", "checkpoint_path": "/models/m",
                                      "served_model_name": "m", "tensor_parallel_size": 8},
                       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}
RERUN = 'if [ "$HPCEVAL_RESTART_COUNT" -gt 0 ]; then'
# the backend's env.j2: Slurm's variables under hpceval's names
ENV_BLOCK = "\n{\n  export HPCEVAL_JOB_ID="


@pytest.mark.parametrize(("overrides", "requeue"), [
    ([], True),
    (["execution.node_failure_retries=0"], False),
    (["execution.auto_resume=false"], False),
])
def test_requeue_only_when_a_node_failure_may_resume(render: RenderFn, overrides: list[str],
                                                      requeue: bool) -> None:
    script = render("slurm", RUN, overrides)
    header = script[:script.index("\n\n")]
    assert ("#SBATCH --requeue" in header) is requeue
    assert ("#SBATCH --no-requeue" in header) is not requeue
    assert (RERUN in script) is requeue


def test_a_site_requeue_flag_is_written_once(render: RenderFn) -> None:
    script = render("slurm", RUN, ["execution.sbatch_extra_flags.requeue=false"])
    assert "requeue" not in script[:script.index("\n\n")]


def rerun(script: str, tmp_path: Path, restart: int, allocations: int,
          preemptions: int = 0) -> tuple[int, str, str]:
    """The rendered rerun check with SLURM_RESTART_COUNT=restart after `allocations` lines in
    $MODEL_DIR/allocations and `preemptions` of this job (id 7) that Slurm requeued, read
    through the Slurm backend's env block as the job reads it: (exit status, log, job-failure)."""
    model_dir = tmp_path / f"model-{restart}-{allocations}-{preemptions}"
    model_dir.mkdir()
    (model_dir / "allocations").write_text("".join(f"{100 + i} 0\n" for i in range(allocations)))
    (model_dir / "preemptions").write_text("".join(f"7 {i}\n" for i in range(preemptions))
                                           + "70 1\n")  # another job's, not counted
    start = script.index(RERUN)
    block = script[start:script.index("\nfi\n", start) + 4]
    start_fn = script.index("\njob_failure() {") + 1
    start_env = script.index(ENV_BLOCK) + 1
    body = ("set -uo pipefail\nlog() { echo \"$*\"; }\n"
            + script[start_env:script.index("\n}\n", start_env) + 3]
            + script[start_fn:script.index("\n}\n", start_fn) + 3]
            + "MAX_ALLOCATIONS=3\n" + block + "echo continued\n")
    env = {"PATH": os.environ["PATH"], "MODEL_DIR": str(model_dir), "HPCEVAL_INVOCATION_ID": "inv",
           "SLURM_RESTART_COUNT": str(restart), "SLURM_JOB_ID": "7"}
    done = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True,
                          check=False, timeout=30)
    failure = model_dir / "job-failure"
    return done.returncode, done.stdout, failure.read_text() if failure.exists() else ""


def test_a_rerun_is_bounded_by_retries_and_max_walltime(render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", RUN, ["execution.node_failure_retries=2"])
    rc, out, failure = rerun(script, tmp_path, 0, 1)  # the first run: no check
    assert (rc, failure) == (0, "") and out == "continued\n"
    rc, out, failure = rerun(script, tmp_path, 2, 2)  # the second rerun: still allowed
    assert (rc, failure) == (0, "") and \
        "rerun 2: after 0 preemption(s) and 2 node failure(s) (at most 2)" in out
    rc, out, failure = rerun(script, tmp_path, 3, 2)  # a third node failure: stays failed
    assert rc == 1 and "continued" not in out
    assert "nodes failed 3 times; execution.node_failure_retries is 2" in failure
    assert "hpceval resume inv" in failure
    rc, out, failure = rerun(script, tmp_path, 1, 4)  # max_walltime used up (3 allocations)
    assert rc == 1 and "execution.max_walltime" in failure


def test_preemptions_that_slurm_requeued_are_not_node_failures(render: RenderFn,
                                                               tmp_path: Path) -> None:
    # hpc-admin-2 N2: under PreemptMode=REQUEUE every preemption reran the job with a higher
    # SLURM_RESTART_COUNT, and the third ended it as "the job's nodes failed 3 times"
    script = render("slurm", RUN, ["execution.node_failure_retries=2"])
    rc, out, failure = rerun(script, tmp_path, 3, 3, preemptions=3)
    assert (rc, failure) == (0, ""), out
    assert "rerun 3: after 3 preemption(s) and 0 node failure(s)" in out
    rc, out, failure = rerun(script, tmp_path, 5, 3, preemptions=2)  # 3 node failures
    assert rc == 1 and "nodes failed 3 times" in failure
    rc, out, failure = rerun(script, tmp_path, 3, 4, preemptions=3)  # but max_walltime holds
    assert rc == 1 and "after 3 preemption(s) and 0 node failure(s)" in failure
    assert "execution.max_walltime" in failure
