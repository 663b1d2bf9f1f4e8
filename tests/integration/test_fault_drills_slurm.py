"""Scheduler-level fault drills (issue 7) on the real Slurm dev cluster.

Each drill breaks a run the way a cluster does, then checks three things: what
`hpceval status` says (state AND reason, from the CLI), that no finished task's files changed
(bytes and mtime, before and after), and that `hpceval resume` finishes the run.

1. the job is cancelled while queued (submitted with --hold, scancel while PENDING);
2. the job is cancelled while its model server loads (the server sleeps before it serves);
3. the job is cancelled mid-task, then two users resume the run at the same moment: one
   successor job, the other resume is told "already resumed as job N";
4. node3's slurmd and the job's processes on it are killed: NODE_FAIL, and Slurm reruns the
   job by itself (#SBATCH --requeue, execution.node_failure_retries) once node3 is back.

The lm-eval drills (scancel mid-run with real scores, the walltime chain, dying instances) are
in test_resume_drills.py. Here a cheap host harness (curl + a few lines of Python) talks to the
oracle server (tests/fakes/oracle_server.py) behind a `command` deployment, so each drill takes
seconds, not minutes. Task `hold` answers one request, then on its first run only (a marker
file) waits ten minutes: the interruption always falls inside it, and the resumed job
finishes it at once.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import (
    Snapshot,
    Submitted,
    assert_untouched,
    hpceval,
    job_state,
    oracle_command,
    snapshot_done,
    status,
    submit_run,
    wait_done,
    wait_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

MODEL = "oracle"
QUICK, HOLD = "drill-harness.quick", "drill-harness.hold"
RESUMED = "`hpceval resume` continues"
DRILL_NODE = "node3"  # alone in partition "drill": killing its slurmd touches no other job
SLURMD_PID = Path(f"/run/slurm/slurmd-{DRILL_NODE}.pid")
CLUSTER_LOCK = Path("/run/hpceval-slurm-cluster.lock")  # scripts/slurm/start-cluster.sh's
SCORE = ("import json, sys; d = sys.argv[1]; r = json.load(open(d + '/response.json')); "
         "a = r['choices'][0]['message']['content']; "
         "json.dump({'results': {sys.argv[2]: {'answered,none': float(bool(a))}}}, "
         "open(d + '/results_0.json', 'w'))")
CATALOGUE = """\
schema: 1
harness:
  name: drill-harness
  description: one chat request with curl, scored; `hold` then waits on its first run
  runtime: host
  parser: lm_eval
  default_endpoint_type: chat
  command: |
    {%- set rest = '", "messages": [{"role": "user", "content": "What is 2+2?"}]}' -%}
    {%- set body = '{"model": "' ~ model_id ~ rest -%}
    curl -sf -H 'Content-Type: application/json' \\
      -H @<(echo "Authorization: Bearer ${OPENAI_API_KEY:-}") \\
      -d {{ body | q }} {{ endpoint_url | q }} \\
      -o {{ output_dir | q }}/response.json || exit 3
    {% if task.task_id == "hold" -%}
    {%- set marker = params.extra.marker | q %}
    if [ ! -e {{ marker }} ]; then touch {{ marker }}; sleep 600; fi
    {% endif -%}
    python3 -c {{ score | q }} {{ output_dir | q }} {{ task.name | q }}
tasks:
  - {name: quick, task_id: quick, endpoint_type: chat, description: one request}
  - {name: hold, task_id: hold, endpoint_type: chat, description: "one request, then waits once"}
""".replace("{{ score | q }}", shlex.quote(SCORE))


class HoldingClient(CommandSlurmClient):
    """Submits with --hold: the job stays PENDING (JobHeldUser) until the drill cancels it.
    Only the first submission goes through it; `resume` uses a plain client, so the resumed
    job runs the same script unheld."""

    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None) -> str:
        return super().submit(script_path, extra_args=["--hold", *extra_args],
                              dependency=dependency)


@contextmanager
def drill_env(folder: Path) -> Iterator[Path]:
    """The drill's own catalogue and caches in ``folder`` (the nodes are this machine: tmp is
    shared), in the environment while the block runs."""
    (folder / "catalogue").mkdir(exist_ok=True)
    (folder / "catalogue" / "drill.yaml").write_text(CATALOGUE)
    mp = pytest.MonkeyPatch()
    mp.setenv("HPCEVAL_TASKS_PATH", str(folder / "catalogue"))
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HPCEVAL_CACHE_DIR"):
        mp.setenv(name, str(folder / name.lower()))
    for name in ("HPCEVAL_PROFILE", "HPCEVAL_OUTPUT_DIRS"):
        mp.delenv(name, raising=False)
    try:
        yield folder
    finally:
        mp.undo()


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    with drill_env(tmp_path) as folder:
        yield folder


@pytest.fixture
def runs(slurm_cluster: CommandSlurmClient) -> Iterator[list[Submitted]]:
    """Every job of the drill's runs (resumes too) is cancelled at the end, pass or fail."""
    started: list[Submitted] = []
    try:
        yield started
    finally:
        slurm_cluster.cancel([j for run in started for j in run.jobs()])


def run_file(work: Path, tasks: Sequence[str], *, partition: str | None = None,
             load_once_s: int = 0) -> Path:
    """One model, tasks of the drill harness; `load_once_s`: the server's first start sleeps
    that long before serving (a model load), later starts serve at once."""
    command = oracle_command(MODEL, work / "requests.jsonl")
    if load_once_s:
        marker = shlex.quote(str(work / "loaded-once"))
        command = f"[ -e {marker} ] || {{ touch {marker}; sleep {load_once_s}; }}; {command}"
    execution: dict[str, Any] = {"nodes": 1, "gpus_per_node": 0, "walltime": "00:15:00",
                                 "output_dir": str(work / "runs")}
    if partition:
        execution["partition"] = partition
    marker = str(work / "held-once")
    run = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": execution,
        "deployment": {"served_model_name": MODEL, "health_timeout": 300, "command": command},
        "evaluation": {"tasks": [{"name": f"drill-harness.{t}",
                                  "params": {"extra": {"marker": marker}}} for t in tasks]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def holding(run: Submitted, work: Path) -> bool:
    """`quick` is done and `hold` has its answer (the server answers) and now waits."""
    return (run.task_dir(QUICK) / "done").exists() and (work / "held-once").exists()


def resume_and_finish(client: CommandSlurmClient, run: Submitted, tasks: Sequence[str]
                      ) -> str:
    """`hpceval resume RUN` (the CLI); the resumed job completes and every task is done."""
    done = hpceval("resume", str(run.run_dir))
    assert done.returncode == 0, done.stderr
    match = re.search(r"resumed as slurm job (\d+)", done.stdout)
    assert match, done.stdout
    job = match.group(1)
    assert run.jobs()[-1] == job
    assert wait_done(client, job, 120) == "COMPLETED", run.log(job)[-3000:]
    assert_finished(run, tasks, attempts=len(run.jobs()))
    return job


def assert_finished(run: Submitted, tasks: Sequence[str], attempts: int) -> None:
    shown = status(run.run_dir)
    [model] = shown["models"]
    assert (shown["state"], model["attempts"]) == ("done", attempts), shown
    for key in (f"drill-harness.{t}" for t in tasks):
        result = json.loads((run.task_dir(key) / "results.json").read_text())
        [metric] = result["metrics"]
        assert (metric["name"], metric["value"]) == ("answered", 1.0), result


def assert_status(run: Submitted, state: str, reason: str) -> dict[str, Any]:
    """`hpceval status` shows `state`, and a reason that matches the regex `reason`."""
    shown = status(run.run_dir)
    assert shown["state"] == state and re.fullmatch(reason, shown["reason"]), shown
    return shown


# --- 1. cancelled while queued ------------------------------------------------------------------

def test_cancelled_while_queued(slurm_cluster: CommandSlurmClient, work: Path,
                                runs: list[Submitted]) -> None:
    run = submit_run(HoldingClient(), run_file(work, ["quick"]))
    runs.append(run)
    # slurmdbd learns the pending reason after the job itself: sacct lists a fresh held job as
    # PENDING with reason None for a moment, so wait for the reason, not only the state
    wait_for(lambda: status(run.run_dir)["reason"] == "held by user", 30,
             "sacct to list it held", interval=1.0)
    assert_status(run, "queued", "held by user")
    slurm_cluster.cancel([run.first_job])
    assert wait_done(slurm_cluster, run.first_job, 30) == "CANCELLED"
    assert_status(run, "cancelled", rf"cancelled by uid \d+ while queued \(it never started\); "
                                    rf"{re.escape(RESUMED)}")
    assert not (run.model_dir / f"slurm-{run.first_job}.log").exists()
    resume_and_finish(slurm_cluster, run, ["quick"])


# --- 2. cancelled while the model server loads --------------------------------------------------

def test_cancelled_while_the_server_loads(slurm_cluster: CommandSlurmClient, work: Path,
                                          runs: list[Submitted]) -> None:
    run = submit_run(slurm_cluster, run_file(work, ["quick"], load_once_s=300))
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
    run = submit_run(slurm_cluster, run_file(work, ["quick", "hold"]))
    runs.append(run)
    wait_for(lambda: holding(run, work), 90, "task hold to start waiting", interval=0.5)
    before = snapshot_done(run.model_dir)
    slurm_cluster.cancel([run.first_job])
    assert wait_done(slurm_cluster, run.first_job, 30) == "CANCELLED"
    shown = assert_status(run, "cancelled", rf"cancelled by uid \d+ mid-task \(1/2 tasks done\); "
                                            rf"{re.escape(RESUMED)}")
    assert [t["state"] for t in shown["models"][0]["tasks"]] == ["done", "cancelled"], shown

    # Two users, two processes, one moment: both pass the run's state check unless the
    # resume lock serialises them.
    command = [sys.executable, "-m", "hpceval", "resume", str(run.run_dir)]
    both = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    outputs = [(p.wait(120), *p.communicate()) for p in both]
    ok = [out for rc, out, _ in outputs if rc == 0]
    refused = [err for rc, _, err in outputs if rc != 0]
    assert len(ok) == 1 and len(refused) == 1, outputs
    match = re.search(r"resumed as slurm job (\d+)", ok[0])
    assert match, ok
    job = match.group(1)
    assert f"already resumed as job {job}" in refused[0], refused
    assert run.jobs() == [run.first_job, job]  # exactly one successor
    assert wait_done(slurm_cluster, job, 120) == "COMPLETED", run.log(job)[-3000:]
    assert f"task {QUICK}: done in an earlier job, skipped" in run.log(job)
    assert_finished(run, ["quick", "hold"], attempts=2)
    assert_untouched(before, run.model_dir, [QUICK])


# --- 4. a node dies: NODE_FAIL ------------------------------------------------------------------

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
    """slurmd back on node3, started as scripts/slurm/start-cluster.sh starts it (own UTS
    namespace, under the script's lock, without inheriting the lock), and node3 usable again
    (ReturnToService=2 returns it once slurmd registers; else `scontrol update ... resume`).
    Only this slurmd: the script itself would also apply any slurm.conf change in the
    working tree, restarting daemons other people's jobs depend on."""
    import fcntl

    alive = SLURMD_PID.exists() and Path(f"/proc/{SLURMD_PID.read_text().strip()}").exists()
    if not alive:
        with CLUSTER_LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            subprocess.run(["unshare", "--uts", "sh", "-c",
                            f"hostname {DRILL_NODE} && exec /usr/sbin/slurmd -N {DRILL_NODE}"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                           check=True, close_fds=True)
    deadline = time.monotonic() + 90
    while node_state().rstrip("*~#") not in ("idle", "mixed", "allocated", "completing"):
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
    of this module do (they use partition debug, node1 and node2); test_node_failure, the
    module's last test, checks the rest."""

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
    run = submit_run(client, run_file(work, ["quick", "hold"], partition="drill"))
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


@pytest.fixture(scope="module", autouse=True)
def node_killed(request: pytest.FixtureRequest, slurm_cluster: CommandSlurmClient,
                tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[NodeKilled | BaseException | None]:
    """kill_node_under_a_job when the module starts, if test_node_failure was selected. What
    fails there is test_node_failure's failure (it re-raises it), not the other drills'. At
    the end: node3 restored (if the test did not get that far) and the run's jobs cancelled."""
    if "test_node_failure" not in {item.name for item in request.session.items}:
        yield None
        return
    outcome: NodeKilled | BaseException
    runs: list[Submitted] = []
    with drill_env(tmp_path_factory.mktemp("node-failure")) as work:
        try:
            outcome = kill_node_under_a_job(slurm_cluster, work, runs)
        except Exception as exc:  # reported by test_node_failure
            outcome = exc
    try:
        yield outcome
    finally:
        try:
            restore_node()
        finally:
            slurm_cluster.cancel([j for run in runs for j in run.jobs()])


def test_node_failure(slurm_cluster: CommandSlurmClient,
                      node_killed: NodeKilled | BaseException | None) -> None:
    """A node failure resumes by itself: #SBATCH --requeue, Slurm reruns the same job once
    node3 is back, the rerun skips the done task (execution.node_failure_retries)."""
    if isinstance(node_killed, BaseException):
        raise node_killed
    assert node_killed is not None
    run, before, killed_at = node_killed.run, node_killed.before, node_killed.killed_at
    with drill_env(node_killed.work):
        try:
            # SlurmdTimeout=30: the controller gives node3 up after 30-40 s and requeues the job
            wait_for(lambda: restarts(run.first_job) == 1, 120, "Slurm to requeue the job",
                     interval=1.0)
            detected_s = time.monotonic() - killed_at
            assert run.jobs() == [run.first_job]  # the same job runs again: no successor
            assert_untouched(before, run.model_dir, [QUICK])
        finally:
            restore_node()
        # the requeued job waits for node3 (partition "drill"), now restored, and completes.
        # Most of the drill's time is Slurm holding the requeued job back until its BeginTime,
        # cred_expire (120 s) after the requeue (the other drills run meanwhile); `scontrol
        # update jobid=N StartTime=now` cut that pause once (2026-12-02) and slurmctld 22.05
        # segfaulted as it started the job (node3 still held the old launch's stepd).
        deadline = time.monotonic() + 300
        while job_state(slurm_cluster, run.first_job) != "COMPLETED":
            assert time.monotonic() < deadline, run.log(run.first_job)[-3000:]
            time.sleep(1.0)
        log = run.log(run.first_job)
        assert "rerun 1 of at most 2 after a node failure" in log, log[-3000:]
        assert_finished(run, ["quick", "hold"], attempts=len(run.jobs()))
        assert_untouched(before, run.model_dir, [QUICK])
    print(f"\nnode3 free after {node_killed.waited:.0f} s; requeued {detected_s:.0f} s after "
          f"the kill; rerun completed {time.monotonic() - killed_at:.0f} s after it")
