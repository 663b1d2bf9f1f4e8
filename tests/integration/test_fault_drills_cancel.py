"""Scheduler-level fault drills (issue 7) on the real Slurm dev cluster: a job cancelled.

Each drill breaks a run the way a cluster does, then checks three things: what
`hpceval status` says (state AND reason, from the CLI), that no finished task's files changed
(bytes and mtime, before and after), and that `hpceval resume` finishes the run.

1. the job is cancelled while queued (submitted with --hold, scancel while PENDING);
2. the job is cancelled while its model server loads (the server sleeps before it serves);
3. the job is cancelled mid-task, then two shells of its user resume the run at the same
   moment: one successor job, the other resume is told "already resumed as job N".

Every run is submitted and resumed by alice, the site's ordinary user, in a folder of hers.

The fourth, a node failure, is test_fault_drills_node.py: its node is killed when these start
(node_drill.node_killed), so Slurm's minutes of requeue delay pass while they run. The run and
its harness: scheduler_drills.py. The lm-eval drills (scancel mid-run with real scores, the
walltime chain, dying instances) are in test_resume_drills.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.site_users import USER, resumed, user_popen

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import (
    Submitted,
    assert_untouched,
    snapshot_done,
    status,
    submit_run,
    wait_done,
    wait_for,
)
from tests.integration.scheduler_drills import (
    QUICK,
    RESUMED,
    assert_finished,
    assert_status,
    drill_env,
    holding,
    resume_and_finish,
    run_file,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.usefixtures("node_killed")]


@pytest.fixture
def work(user_tmp: Path) -> Iterator[Path]:
    """The drill's folder: alice's (the site's ordinary user submits its runs)."""
    with drill_env(user_tmp) as folder:
        yield folder


@pytest.fixture
def runs(slurm_cluster: CommandSlurmClient) -> Iterator[list[Submitted]]:
    """Every job of the drill's runs (resumes too) is cancelled at the end, pass or fail."""
    started: list[Submitted] = []
    try:
        yield started
    finally:
        slurm_cluster.cancel([j for run in started for j in run.jobs()])


# --- 1. cancelled while queued ------------------------------------------------------------------

def test_cancelled_while_queued(slurm_cluster: CommandSlurmClient, work: Path,
                                runs: list[Submitted]) -> None:
    run = submit_run(run_file(work, ["quick"]), hold=True)
    runs.append(run)
    # slurmdbd learns the pending reason after the job itself: sacct lists a fresh held job as
    # PENDING with reason None for a while. The while grew past 30 s once (2026-12-02, node3
    # killed just before) and past 90 s once in CI (2026-12-06): slurmctld resends a pending
    # job's record on its own schedule. The mapping of JobHeldUser to "held by user" is tested
    # on recorded sacct output (tests/backends/slurm); here the subject is the cancellation, so
    # after 90 s a status of "queued" with no reason yet is accepted while squeue shows the hold.
    seen: list[Any] = []

    def held() -> bool:
        seen[:] = [status(run.run_dir), subprocess.run(
            ["squeue", "-h", "-j", run.first_job, "-o", "%T %r"], capture_output=True,
            text=True, timeout=20, check=False).stdout.strip()]
        return bool(seen[0]["reason"] == "held by user")

    try:
        wait_for(held, 90, "sacct to list it held", interval=1.0)
        assert_status(run, "queued", "held by user")
    except AssertionError as exc:
        last = f"{exc}; last: status {seen[0] if seen else None}, squeue {seen[1:]!r}"
        assert seen and seen[1] == "PENDING JobHeldUser", last
        assert_status(run, "queued", "")
    slurm_cluster.cancel([run.first_job])
    assert wait_done(slurm_cluster, run.first_job, 30) == "CANCELLED"
    assert_status(run, "cancelled", rf"cancelled by uid \d+ while queued \(it never started\); "
                                    rf"{re.escape(RESUMED)}")
    assert not (run.model_dir / f"slurm-{run.first_job}.log").exists()
    resume_and_finish(slurm_cluster, run, ["quick"])


# --- 2. cancelled while the model server loads --------------------------------------------------

def test_cancelled_while_the_server_loads(slurm_cluster: CommandSlurmClient, work: Path,
                                          runs: list[Submitted]) -> None:
    run = submit_run(run_file(work, ["quick"], load_once_s=300))
    runs.append(run)
    # in the health wait: the job polls a server that sleeps before it serves
    wait_for(lambda: "waiting up to" in run.log(run.first_job)
             and (work / "loaded-once").exists(), 60, "the health wait", interval=0.5)
    slurm_cluster.cancel([run.first_job])
    assert wait_done(slurm_cluster, run.first_job, 30) == "CANCELLED"
    assert_status(run, "cancelled", rf"cancelled by uid \d+ while the model server was loading "
                                    rf"\(no task had started\); {re.escape(RESUMED)}")
    assert "all instances ready" not in run.log(run.first_job)
    resume_and_finish(slurm_cluster, run, ["quick"])


# --- 3. cancelled mid-task, then two users resume at once ---------------------------------------

def test_cancelled_mid_task_then_two_resumes_at_once(slurm_cluster: CommandSlurmClient,
                                                     work: Path, runs: list[Submitted]) -> None:
    run = submit_run(run_file(work, ["quick", "hold"]))
    runs.append(run)
    wait_for(lambda: holding(run, work), 90, "task hold to start waiting", interval=0.5)
    before = snapshot_done(run.model_dir)
    slurm_cluster.cancel([run.first_job])
    assert wait_done(slurm_cluster, run.first_job, 30) == "CANCELLED"
    shown = assert_status(run, "cancelled", rf"cancelled by uid \d+ mid-task \(1/2 tasks done\); "
                                            rf"{re.escape(RESUMED)}")
    assert [t["state"] for t in shown["models"][0]["tasks"]] == ["done", "cancelled"], shown

    # Two shells, two processes, one moment: both pass the run's state check unless the
    # resume lock serialises them.
    command = [sys.executable, "-m", "hpceval", "resume", str(run.run_dir)]
    both = [user_popen(USER, command, os.environ) for _ in range(2)]
    outputs = [subprocess.CompletedProcess(command, p.wait(120), *p.communicate())
               for p in both]
    ok = [out for out in outputs if out.returncode == 0]
    refused = [out.stderr for out in outputs if out.returncode != 0]
    assert len(ok) == 1 and len(refused) == 1, outputs
    job = resumed(ok[0])
    assert f"already resumed as job {job}" in refused[0], refused
    assert run.jobs() == [run.first_job, job]  # exactly one successor
    assert wait_done(slurm_cluster, job, 120) == "COMPLETED", run.log(job)[-3000:]
    assert f"task {QUICK}: done in an earlier job, skipped" in run.log(job)
    assert_finished(run, ["quick", "hold"], attempts=2)
    assert_untouched(before, run.model_dir, [QUICK])
