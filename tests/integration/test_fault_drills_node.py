"""Scheduler-level fault drill (issue 7) on the real Slurm dev cluster: a node dies.

node3's slurmd and the job's processes on it are killed (node_drill.node_killed, when the first
scheduler drill starts): NODE_FAIL, and Slurm reruns the job by itself (#SBATCH --requeue,
execution.node_failure_retries) once node3 is back. As in test_fault_drills_cancel.py, the
drill checks what `hpceval status` says, that the finished task's files did not change, and
that the run finishes (here without `hpceval resume`).
"""

from __future__ import annotations

import time

import pytest

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import assert_untouched, job_state, wait_for
from tests.integration.node_drill import NodeDrill, restarts, restore_node
from tests.integration.scheduler_drills import QUICK, assert_finished, drill_env

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_node_failure(slurm_cluster: CommandSlurmClient, node_killed: NodeDrill) -> None:
    """A node failure resumes by itself: #SBATCH --requeue, Slurm reruns the same job once
    node3 is back, the rerun skips the done task (execution.node_failure_retries)."""
    try:
        killed = node_killed.outcome
        if isinstance(killed, BaseException):
            raise killed
        assert killed is not None
        run, before, killed_at = killed.run, killed.before, killed.killed_at
        with drill_env(killed.work):
            try:
                # SlurmdTimeout=30: the controller gives node3 up after 30-40 s and requeues it
                wait_for(lambda: restarts(run.first_job) == 1, 120, "Slurm to requeue the job",
                         interval=1.0)
                detected_s = time.monotonic() - killed_at
                assert run.jobs() == [run.first_job]  # the same job runs again: no successor
                assert_untouched(before, run.model_dir, [QUICK])
            finally:
                restore_node()
            # the requeued job waits for node3 (partition "drill"), now restored, and
            # completes. Much of the drill's time is Slurm holding the requeued job back until
            # its BeginTime, cred_expire (30 s on the dev cluster) after the requeue (the other
            # drills run meanwhile); `scontrol update jobid=N StartTime=now` cut that pause once
            # (2026-12-02) and slurmctld 22.05 segfaulted as it started the job (node3 still
            # held the old launch's stepd).
            deadline = time.monotonic() + 300
            while job_state(slurm_cluster, run.first_job) != "COMPLETED":
                assert time.monotonic() < deadline, run.log(run.first_job)[-3000:]
                time.sleep(1.0)
            log = run.log(run.first_job)
            assert "rerun 1: after 0 preemption(s) and 1 node failure(s) (at most 2)" in log, \
                log[-3000:]
            assert_finished(run, ["quick", "hold"], attempts=len(run.jobs()))
            assert_untouched(before, run.model_dir, [QUICK])
    finally:  # node3 back now, not only at the end of the session
        node_killed.finish()
    print(f"\nnode3 free after {killed.waited:.0f} s; requeued {detected_s:.0f} s after "
          f"the kill; rerun completed {time.monotonic() - killed_at:.0f} s after it")
