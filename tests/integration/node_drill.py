"""The node failure drill's first half and its clean-up (test_fault_drills_node.py checks the
rest): node3's slurmd and every process of a running job on it killed, as a node crash does.

Slurm takes minutes over its part (30-40 s until the controller gives node3 up, then ~120 s,
the BeginTime of a requeued job, until the rerun may start), so the kill happens when the
first scheduler drill starts (`node_killed`, session-scoped: test_fault_drills_cancel.py uses
it too) and the other drills run meanwhile on partition debug.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.site_users import UserTmp

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import (
    Snapshot,
    Submitted,
    snapshot_done,
    status,
    submit_run,
    wait_for,
)
from tests.integration.scheduler_drills import assert_status, drill_env, holding, run_file

DRILL_NODE = "node3"  # alone in partition "drill": killing its slurmd touches no other job
SLURMD_PID = Path(f"/run/slurm/slurmd-{DRILL_NODE}.pid")
CLUSTER_LOCK = Path("/run/hpceval-slurm-cluster.lock")  # scripts/slurm/start-cluster.sh's
START_NODE = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "start-node.sh"


def job_processes(job_id: str) -> list[int]:
    """Every process of a job on this machine (all the dev cluster's nodes are local): its
    slurmstepds ("slurmstepd: [<id>.batch]", "[<id>.0]", ...) and all that run with
    SLURM_JOB_ID=<id> (the job script, srun, the server, the proxy, the harness)."""
    stepd = f"slurmstepd: [{job_id}.".encode()
    env = f"\0SLURM_JOB_ID={job_id}\0".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = b"\0" + (proc / "environ").read_bytes() + b"\0"
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if cmdline.startswith(stepd) or env in environ:
            found.append(int(proc.name))
    return found


def kill_node(job_id: str) -> int:
    """What a node crash does to a job: slurmd and every process of the job die at once, with
    no chance to clean up (SIGKILL). Returns how many of the job's processes were killed."""
    assert job_processes(job_id), f"no process of job {job_id} found"
    os.kill(int(SLURMD_PID.read_text().strip()), signal.SIGKILL)
    killed = 0
    for _ in range(20):  # a process may fork while we kill: repeat until none is left
        left = job_processes(job_id)
        if not left:
            return killed
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"processes of job {job_id} survive SIGKILL: {job_processes(job_id)}")


def node_state() -> str:
    done = subprocess.run(["sinfo", "-h", "-N", "-n", DRILL_NODE, "-o", "%T"],
                          capture_output=True, text=True, timeout=20, check=False)
    return done.stdout.split()[0] if done.stdout.split() else "?"


def restore_node() -> None:
    """slurmd back on node3, started by scripts/slurm/start-node.sh as start-cluster.sh starts
    it (its network and UTS namespaces; under the script's lock, without inheriting the lock),
    and node3 usable again: responding (no `*`: a slurmd started outside the node's network
    namespace is listed, unreachable, as idle*), ReturnToService=2 returns it once slurmd
    registers, else `scontrol update ... resume`. Only this slurmd: start-cluster.sh would also
    apply any slurm.conf change in the working tree, restarting daemons other people's jobs
    depend on."""
    import fcntl

    alive = SLURMD_PID.exists() and Path(f"/proc/{SLURMD_PID.read_text().strip()}").exists()
    if not alive:
        with CLUSTER_LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            subprocess.run(["bash", str(START_NODE), DRILL_NODE],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                           check=True, close_fds=True)
    deadline = time.monotonic() + 90
    while node_state().rstrip("~#") not in ("idle", "mixed", "allocated", "completing"):
        if time.monotonic() > deadline:
            raise AssertionError(f"{DRILL_NODE} stays {node_state()} after its slurmd restart")
        if node_state().startswith(("down", "drain", "fail")):
            subprocess.run(["scontrol", "update", f"nodename={DRILL_NODE}", "state=resume"],
                           capture_output=True, timeout=20, check=False)
        time.sleep(1)


def others_on_drill_node(mine: str = "") -> list[str]:
    """Jobs that run on node3, or wait for a partition that holds it (drill, and lowprio for
    the preemption drills): a node failure would fail them too, and our job in "drill" would
    preempt a "lowprio" one."""
    parts = subprocess.run(["sinfo", "-h", "-n", DRILL_NODE, "-o", "%R"], capture_output=True,
                           text=True, timeout=20, check=False).stdout.split()
    done = subprocess.run(["squeue", "-h", "-o", "%i %P %N"], capture_output=True, text=True,
                          timeout=20, check=False)
    return [line.split()[0] for line in done.stdout.splitlines()
            if line.split()[0] != mine and (line.split()[1] in parts or DRILL_NODE in line)]


def restarts(job_id: str) -> int:
    """Slurm's count of reruns of a job (scontrol's Restarts=, 0 before a requeue)."""
    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                           timeout=20, check=False).stdout
    match = re.search(r"\bRestarts=(\d+)", shown)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class NodeKilled:
    """The first half of the node failure drill, done when the module starts: node3 killed
    under a running job. Slurm's part, 30-40 s until the controller gives node3 up and 120 s
    (its BeginTime on a requeued job) until the rerun starts, then runs while the other drills
    drills do (test_fault_drills_cancel.py: partition debug, node1 and node2);
    test_fault_drills_node.py's test_node_failure, run after them, checks the rest."""

    work: Path
    run: Submitted
    before: Snapshot
    waited: float  # s until no other job was on node3
    killed_at: float  # time.monotonic()


def kill_node_under_a_job(client: CommandSlurmClient, work: Path,
                          runs: list[Submitted]) -> NodeKilled:
    # Other drills' jobs on node3 would fail with ours: let them end first (bounded).
    waited = time.monotonic()
    wait_for(lambda: not others_on_drill_node(), 300, "other jobs to leave node3", interval=2.0)
    waited = time.monotonic() - waited
    run = submit_run(run_file(work, ["quick", "hold"], partition="drill"))
    runs.append(run)
    assert "#SBATCH --requeue" in (run.run_dir / "job.sbatch").read_text()
    # the server is answering: `quick` is done and `hold` got its answer
    wait_for(lambda: holding(run, work), 90, "task hold to start waiting", interval=0.5)
    # sacct lags the controller (hpceval shows such a job as unknown): wait until it lists it
    wait_for(lambda: status(run.run_dir)["state"] != "unknown", 30, "sacct to list the job",
             interval=1.0)
    assert_status(run, "running", "")
    before = snapshot_done(run.model_dir)
    assert not others_on_drill_node(run.first_job)  # none came meanwhile (or it fails too)
    killed_at = time.monotonic()
    assert kill_node(run.first_job) >= 3  # stepds, job script, server, harness...
    return NodeKilled(work, run, before, waited, killed_at)


@dataclass
class NodeDrill:
    """What `node_killed` gives test_node_failure: the kill (or why it failed), and `finish`,
    which puts node3 back and cancels the drill's jobs (again at the end of the session)."""

    client: CommandSlurmClient
    outcome: NodeKilled | BaseException | None
    runs: list[Submitted] = field(default_factory=list)

    def finish(self) -> None:
        try:
            restore_node()
        finally:
            self.client.cancel([j for run in self.runs for j in run.jobs()])


@pytest.fixture(scope="session")
def node_killed(request: pytest.FixtureRequest, slurm_cluster: CommandSlurmClient,
                user_tmp_factory: UserTmp) -> Iterator[NodeDrill]:
    """kill_node_under_a_job when the first scheduler drill starts, if test_node_failure was
    selected. What fails there is test_node_failure's failure (it re-raises it), not the other
    drills'."""
    drill = NodeDrill(slurm_cluster, None)
    if "test_node_failure" not in {item.name for item in request.session.items}:
        yield drill
        return
    with drill_env(user_tmp_factory.mktemp("node-failure")) as work:
        try:
            drill.outcome = kill_node_under_a_job(slurm_cluster, work, drill.runs)
        except Exception as exc:  # reported by test_node_failure
            drill.outcome = exc
    try:
        yield drill
    finally:
        drill.finish()
