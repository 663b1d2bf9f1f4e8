"""Auto-resume on the real dev cluster: a job stopped by its walltime, or preempted, submits its
successor, which skips what is done and finishes; a cancelled job and a completed job leave no
successor behind. alice, the site's ordinary user, submits every run; bob's job preempts hers."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.site_users import OTHER

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import sbatch, status, submit_file
from tests.integration.test_rendered_job import SERVER, job_log, wait_done, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# it_resumable stands for a harness whose requests are cached: the first allocation gets
# stopped mid-way, the next one finds its progress (the marker) and finishes quickly.
CATALOGUE = """\
schema: 1
harness:
  name: resume-harness
  description: host tools that finish on their second allocation
  runtime: host
  parser: lm_eval
  default_endpoint_type: chat
  command: |
    if [ -e {{ params.extra.marker | q }} ]; then
      echo '{"results": {"it_resumable": {"acc,none": 1.0}}}' > {{ output_dir | q }}/results_0.json
    else
      touch {{ params.extra.marker | q }} && sleep 900
    fi
tasks:
  - {name: it_resumable, endpoint_type: chat, description: done on the second allocation}
"""


@pytest.fixture
def workdir(user_tmp: Path) -> Iterator[Path]:
    """A folder of alice's on scratch, with the test's catalogue in her environment."""
    (user_tmp / "catalogue").mkdir()
    (user_tmp / "catalogue" / "resume.yaml").write_text(CATALOGUE)
    mp = pytest.MonkeyPatch()
    mp.setenv("HPCEVAL_TASKS_PATH", str(user_tmp / "catalogue"))
    yield user_tmp
    mp.undo()


def submit(run_file: Path) -> tuple[str, Path]:
    """`hpceval submit --profile local-dev RUN_FILE` as alice: (job id, its model's folder)."""
    job, run_dir = submit_file(run_file, "--profile", "local-dev")
    return job, run_dir / "models" / "ref-model"


def chain_report(model_dir: Path, job_ids: list[str]) -> str:
    """What a failed chain assertion needs to be read from a CI log alone: sacct's view of every
    job of the chain (state, exit code, reason, node, times) and each log file by name."""
    sacct = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids),
         "-o", "JobID,State,ExitCode,Reason,NodeList,Submit,Start,End"],
        capture_output=True, text=True, timeout=30, check=False)
    parts = [f"sacct -j {','.join(job_ids)}:\n{sacct.stdout}{sacct.stderr}",
             f"files: {sorted(p.name for p in model_dir.iterdir())}"]
    parts += [f"--- {log.name}\n{log.read_text(errors='replace')}"
              for log in sorted(model_dir.glob("slurm-*.log"))]
    harness = model_dir / "tasks" / "resume-harness.it_resumable" / "harness.log"
    if harness.exists():
        parts.append(f"--- {harness.name}\n{harness.read_text(errors='replace')[-2000:]}")
    return "\n".join(parts)


def run_file(workdir: Path, walltime: str, marker: Path, partition: str = "debug",
             max_walltime: str = "00:05:00", signal_seconds: int = 50) -> Path:
    run = {
        "execution": {"nodes": 1, "gpus_per_node": 0, "output_dir": str(workdir / "runs"),
                      "walltime": walltime, "signal_seconds": signal_seconds,
                      "max_walltime": max_walltime, "partition": partition},
        "deployment": {"type": "command", "runtime": "host", "served_model_name": "ref-model",
                       "command": f"exec python3 {SERVER} --model ref-model",
                       "health_timeout": 60},
        "evaluation": {"tasks": [{"name": "it_resumable",
                                  "params": {"extra": {"marker": str(marker)}}}]},
    }
    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    return path


def test_walltime_stop_resumes_in_a_successor(slurm_cluster: CommandSlurmClient,
                                              workdir: Path) -> None:
    # slurmctld checks time limits every 30 s and sends USR1 at the first check where no more
    # than signal_seconds + 30 s are left (so that it is never late): 60 s before a 2-minute
    # limit is 30-60 s into each job. The successor runs the same script and must finish
    # before its own signal: with 50 s before a 1-minute limit it had 0-30 s, and under CI's
    # load it was stopped in turn (FAILED, its own log saying "successor job").
    first, model_dir = submit(run_file(workdir, "2", workdir / "marker", signal_seconds=60))
    run_dir = model_dir.parent.parent
    state = wait_done(slurm_cluster, first, timeout=180)
    log = job_log(model_dir, first)
    # COMPLETED, not FAILED 143: the successor continues it (hpc-admin-2 N13; TIMEOUT only if
    # stopping took longer than the signal's 60 s)
    assert state in ("COMPLETED", "TIMEOUT"), log
    assert "successor job" in log and "runs the unfinished tasks" in log, log
    lines = (run_dir / "jobs.chain").read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith(" ref-model")  # "<job id> <model key>"
    chain = [lines[0].split()[0]]
    assert wait_done(slurm_cluster, chain[0], timeout=150) == "COMPLETED", chain_report(
        model_dir, [first, *chain])
    task_dir = model_dir / "tasks" / "resume-harness.it_resumable"
    assert (task_dir / "done").exists()
    assert len((model_dir / "allocations").read_text().splitlines()) == 2
    time.sleep(2)
    assert (run_dir / "jobs.chain").read_text().splitlines() == lines  # no third job
    queued = slurm_cluster.squeue([first, *chain])
    assert not [e for e in queued.values() if e.state in ("PENDING", "RUNNING")], queued


def test_completed_job_leaves_no_successor(slurm_cluster: CommandSlurmClient,
                                           workdir: Path) -> None:
    marker = workdir / "marker"
    marker.touch()  # the task finishes at once
    job, model_dir = submit(run_file(workdir, "4", marker))
    run_dir = model_dir.parent.parent
    assert wait_done(slurm_cluster, job) == "COMPLETED"
    assert not (run_dir / "jobs.chain").exists()
    # A resubmission of a finished run exits before starting any server.
    again = sbatch(str(run_dir / "job.sbatch"))
    assert wait_done(slurm_cluster, again) == "COMPLETED"
    log = job_log(model_dir, again)
    assert "every task is done already" in log and "instance 0" not in log


def start_preemptible(workdir: Path, partition: str) -> tuple[Path, str, Path]:
    """Submit the resumable task to a preemptible partition and wait until it runs: (the run
    directory, its job id, its model's folder)."""
    marker = workdir / "marker"
    first, model_dir = submit(run_file(workdir, "5", marker, partition=partition,
                                       max_walltime="00:15:00"))
    wait_for(marker.exists, 90, "the task to start in the first allocation")
    return model_dir.parent.parent, first, model_dir


def preempt() -> str:
    """bob's job in "drill", which preempts whatever runs on the drill node (partition_prio):
    another user's work of a higher priority, as on a site."""
    return sbatch("--partition=drill", "--exclusive", "--time=2", "--output=/dev/null",
                  "--wrap", "sleep 3", user=OTHER)


def test_preempted_job_resumes_in_a_successor(slurm_cluster: CommandSlurmClient,
                                              workdir: Path) -> None:
    """The dev cluster's "drill" partition preempts "lowprio" (PreemptMode=CANCEL): the job gets
    TERM like a scancel, tells the two apart by Slurm's PreemptTime, and continues."""
    run_dir, first, model_dir = start_preemptible(workdir, "lowprio")
    other = preempt()
    try:
        assert wait_done(slurm_cluster, first, timeout=120) == "PREEMPTED"
        log = job_log(model_dir, first)
        assert "preempted: stopping tasks" in log and "successor job" in log, log
        lines = (run_dir / "jobs.chain").read_text().splitlines()
        assert len(lines) == 1 and lines[0].endswith(" ref-model"), lines
        successor = lines[0].split()[0]
        assert wait_done(slurm_cluster, successor, timeout=150) == "COMPLETED", chain_report(
            model_dir, [first, successor])
    finally:
        slurm_cluster.cancel([other])
    assert (model_dir / "tasks" / "resume-harness.it_resumable" / "done").exists()
    assert len((model_dir / "allocations").read_text().splitlines()) == 2
    shown = status(run_dir)  # as alice
    assert shown["state"] == "done", shown["reason"]


def test_a_job_slurm_requeues_after_a_preemption_continues_under_its_id(
        slurm_cluster: CommandSlurmClient, workdir: Path) -> None:
    """Partition "requeue" (PreemptMode=REQUEUE): Slurm queues the preempted job again under
    its own id, so the job submits no successor (hpc-admin-2 N2: it did, and two jobs continued
    one model), and its rerun counts the preemption apart from node failures."""
    run_dir, first, model_dir = start_preemptible(workdir, "requeue")
    other = preempt()
    try:
        # requeued (BeginTime: cred_expire, 30 s here), rerun, and finished: one job id
        deadline = time.monotonic() + 240
        while wait_done(slurm_cluster, first, timeout=240) != "COMPLETED":
            assert time.monotonic() < deadline, chain_report(model_dir, [first])
            time.sleep(1.0)
    finally:
        slurm_cluster.cancel([other])
    log = job_log(model_dir, first)
    assert "preempted, and Slurm queues this job again" in log, chain_report(model_dir, [first])
    assert "successor job" not in log and not (run_dir / "jobs.chain").exists(), log
    assert "rerun 1: after 1 preemption(s) and 0 node failure(s)" in log, log
    assert (model_dir / "tasks" / "resume-harness.it_resumable" / "done").exists()
    shown = status(run_dir)  # as alice
    assert shown["state"] == "done", shown["reason"]


def test_cancelled_job_leaves_no_successor(slurm_cluster: CommandSlurmClient,
                                           workdir: Path) -> None:
    """scancel sends the same TERM as a preemption: this job must stay cancelled."""
    marker = workdir / "marker"
    job, model_dir = submit(run_file(workdir, "5", marker, max_walltime="00:15:00"))
    wait_for(marker.exists, 90, "the task to start")
    slurm_cluster.cancel([job])
    assert wait_done(slurm_cluster, job, timeout=60) == "CANCELLED"
    time.sleep(2)
    assert not (model_dir.parent.parent / "jobs.chain").exists(), job_log(model_dir, job)
