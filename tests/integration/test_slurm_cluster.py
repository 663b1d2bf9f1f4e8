"""hpceval.backends.slurm against the real local dev cluster (scripts/slurm/start-cluster.sh).

All jobs are submitted at once and followed by ONE SacctPoller, the way hpceval tracks a sweep;
the tests then check what it reported. The whole module takes ~10-15 s on the dev cluster.
A TIMEOUT job is deliberately absent: it needs ~90 s (Slurm checks limits every ~30 s).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from hpceval.backends.slurm.client import CommandSlurmClient, SlurmError
from hpceval.backends.slurm.poller import SacctPoller
from hpceval.backends.slurm.states import JobStatus, Phase

if TYPE_CHECKING:  # tests/ is not a package: the fixture's class is only named for typing
    from conftest import SlurmJobs

pytestmark = pytest.mark.slurm

# sacct lags the controller (array tasks by up to ~5 s); allow for other people's jobs on the
# shared dev cluster too. Normally everything is final after ~6-10 s.
DEADLINE_S = 30.0


@dataclass
class Batch:
    ids: dict[str, str]
    poller: SacctPoller
    final: dict[str, JobStatus]
    submitted_at: datetime
    array_tasks: list[str]


@pytest.fixture(scope="module")
def batch(slurm_jobs: SlurmJobs) -> Batch:
    submitted_at = datetime.now()
    ids = {
        "ok": slurm_jobs.submit("ok", 'echo "hello from $SLURMD_NODENAME"'),
        "fail": slurm_jobs.submit("fail", "exit 3"),
        "cancel": slurm_jobs.submit("cancel", "sleep 300"),
        "array": slurm_jobs.submit(
            "array", 'sleep 1; [ "$SLURM_ARRAY_TASK_ID" = 2 ] && exit 3; exit 0', "--array=0-3%2"
        ),
        "multi": slurm_jobs.submit("multi", "srun hostname | sort", "--nodes=2"),
        "gpu": slurm_jobs.submit("gpu", 'echo "CVD=$CUDA_VISIBLE_DEVICES"', "--gpus-per-node=2"),
        # each node writes a file into its /tmp and /var/tmp, then counts the job's files it
        # sees in each
        "tmp": slurm_jobs.submit("tmp", "srun bash -c 'for d in /tmp /var/tmp; do touch "
                                 "$d/probe-$SLURM_JOB_ID-$SLURMD_NODENAME; done; sleep 2; for d "
                                 "in /tmp /var/tmp; do ls $d | grep -c probe-$SLURM_JOB_ID; "
                                 "done'", "--nodes=2"),
    }
    poller = SacctPoller(slurm_jobs.client, min_interval_s=0.5)
    for job_id in ids.values():
        poller.register(job_id, submitted_at=submitted_at)
    tasks = poller.register_array(ids["array"], range(4), submitted_at=submitted_at)

    # Cancel the sleeper once it runs (or after a while regardless: pending jobs cancel too).
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if poller.refresh().get(ids["cancel"], JobStatus(Phase.UNKNOWN)).phase is Phase.RUNNING:
            break
        time.sleep(0.2)
    slurm_jobs.client.cancel([ids["cancel"]])

    final = poller.wait(timeout_s=DEADLINE_S)
    return Batch(ids, poller, final, submitted_at, tasks)


def test_all_jobs_reach_a_final_state(batch: Batch) -> None:
    pending = {job: status for job, status in batch.final.items() if not status.terminal}
    assert not pending, f"not final after {DEADLINE_S} s: {pending}"


def test_completed_job(batch: Batch, slurm_jobs: SlurmJobs) -> None:
    job_id = batch.ids["ok"]
    assert batch.final[job_id].phase is Phase.DONE
    record = batch.poller.record(job_id)
    assert record is not None
    assert record.exit_code == 0
    assert record.node_list in ("node1", "node2")
    assert record.start is not None and record.end is not None
    assert f"hello from {record.node_list}" in slurm_jobs.output("ok", job_id)


def test_failed_job_reports_exit_code(batch: Batch) -> None:
    status = batch.final[batch.ids["fail"]]
    assert (status.phase, status.reason) == (Phase.FAILED, "exit code 3")
    assert status.raw_state == "FAILED"


def test_cancelled_job(batch: Batch) -> None:
    status = batch.final[batch.ids["cancel"]]
    assert status.phase is Phase.CANCELLED
    assert re.fullmatch(r"cancelled by uid \d+", status.reason), status


def test_array_with_one_failing_task(batch: Batch) -> None:
    phases = [batch.final[task].phase for task in batch.array_tasks]
    assert phases == [Phase.DONE, Phase.DONE, Phase.FAILED, Phase.DONE]
    assert batch.final[batch.array_tasks[2]].reason == "exit code 3"
    whole = batch.final[batch.ids["array"]]
    assert (whole.phase, whole.reason) == (Phase.FAILED, "1/4 tasks failed: exit code 3")


def test_two_node_job_runs_srun_on_both_nodes(batch: Batch, slurm_jobs: SlurmJobs) -> None:
    job_id = batch.ids["multi"]
    assert batch.final[job_id].phase is Phase.DONE
    record = batch.poller.record(job_id)
    assert record is not None and record.node_list == "node[1-2]"
    assert slurm_jobs.output("multi", job_id).split() == ["node1", "node2"]


def test_each_node_has_its_own_tmp(batch: Batch, slurm_jobs: SlurmJobs) -> None:
    """Node-local /tmp and /var/tmp (scripts/slurm/node-tmp.sh): nothing passes between nodes,
    or to the login node, through them; the job's output (in pytest's folder) is shared
    storage."""
    from pathlib import Path

    job_id = batch.ids["tmp"]
    assert batch.final[job_id].phase is Phase.DONE
    assert slurm_jobs.output("tmp", job_id).split() == ["1"] * 4
    for folder in ("/tmp", "/var/tmp"):
        assert not list(Path(folder).glob(f"probe-{job_id}-*"))


def test_gpu_job_sees_two_fake_gpus(batch: Batch, slurm_jobs: SlurmJobs) -> None:
    job_id = batch.ids["gpu"]
    assert batch.final[job_id].phase is Phase.DONE
    output = slurm_jobs.output("gpu", job_id)
    assert re.fullmatch(r"CVD=\d+,\d+\n", output), output


def test_starttime_filter_hides_jobs_that_ended_before_it(
    batch: Batch, slurm_cluster: CommandSlurmClient
) -> None:
    job_id = batch.ids["fail"]
    record = batch.poller.record(job_id)
    assert record is not None and record.end is not None
    seen = slurm_cluster.sacct([job_id], starttime=batch.submitted_at - timedelta(seconds=5))
    assert seen[job_id].state == "FAILED"
    # As if job id `job_id` had been reused by a job submitted after this one ended.
    if datetime.now() < record.end + timedelta(seconds=2):
        time.sleep(2)
    later = slurm_cluster.sacct([job_id], starttime=record.end + timedelta(seconds=1))
    assert job_id not in later


def test_squeue_lists_recently_finished_jobs(
    batch: Batch, slurm_cluster: CommandSlurmClient
) -> None:
    entries = slurm_cluster.squeue([batch.ids["ok"], batch.ids["fail"]])
    assert entries[batch.ids["ok"]].state == "COMPLETED"
    assert entries[batch.ids["fail"]].state == "FAILED"


def test_unsatisfiable_request_raises_slurm_error(slurm_jobs: SlurmJobs) -> None:
    with pytest.raises(SlurmError, match="not available"):
        slurm_jobs.submit("too-many-gpus", "true", "--gpus-per-node=5")
