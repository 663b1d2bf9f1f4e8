"""Runtime fault drills on the real Slurm dev cluster (issue 7): the server crashes, a harness
exits non-zero or hangs past its timeout, the results directory is not writable, a results
write runs out of space.

Every drill runs the oracle server (tests/fakes/oracle_server.py) behind a `command`
deployment and the cheap fault harness (tests/fakes/fault-harness.yaml, fault_harness.py),
breaks the run on purpose and checks three things:

* the state and reason `hpceval status --json` shows (the CLI, in a subprocess);
* no completed result is lost or overwritten: every file of a task that was done before the
  fault has the same bytes and mtime after the fault and after the resume;
* `hpceval resume` finishes the run once the fault is removed, re-running only what was not
  done (the resumed job's log says the done tasks were skipped).

alice, the site's ordinary user, submits and resumes every run, in a folder of hers; the test
(root) breaks it, as a failing disk or a full quota would.

The lm-eval drills of tests/integration/test_resume_drills.py (c) check what a dying server does
to lm-eval's scores and the proxy; these check what users see and what `resume` does.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.site_users import USER, owned_mkdir, resumed, user_command

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.config import load_config
from hpceval.runs.jobs import read_jobs
from tests.integration.drill_support import (
    ORACLE,
    Snapshot,
    assert_untouched,
    hpceval,
    snapshot_done,
    status,
    submit_run,
    wait_done,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FAKES = Path(__file__).resolve().parents[1] / "fakes"
HARNESS = FAKES / "fault_harness.py"
MODEL = "oracle"
TERMINAL = {"done", "failed", "cancelled"}


@pytest.fixture
def env(user_tmp: Path, monkeypatch: pytest.MonkeyPatch, lucebench: None) -> Iterator[Path]:
    """The drill's folder (alice's) and the environment her shell gets (a site module's)."""
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(FAKES / "fault-harness.yaml"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HPCEVAL_CACHE_DIR"):
        monkeypatch.setenv(name, str(user_tmp / name.lower()))
    for name in ("HPCEVAL_PROFILE", "HPCEVAL_OUTPUT_DIRS"):
        monkeypatch.delenv(name, raising=False)
    yield user_tmp


@dataclass(frozen=True)
class Task:
    """One fault-harness task; its fault is switched on by writing `fault` (see fault_harness)."""

    name: str  # fault_a, fault_b, fault_c
    requests: int = 2
    metrics: int = 0
    timeout: int | None = None

    @property
    def key(self) -> str:
        return f"fault-harness.{self.name}"


@dataclass
class Drill:
    work: Path
    client: CommandSlurmClient
    run_dir: Path
    model_dir: Path

    def fault_file(self, task: Task) -> Path:
        return self.work / f"{task.name}.fault"

    def task_dir(self, task: Task) -> Path:
        return self.model_dir / "tasks" / task.key

    def jobs(self) -> list[str]:
        return read_jobs(self.run_dir).ids

    def log(self, job_id: str | None = None) -> str:
        path = self.model_dir / f"slurm-{job_id or self.jobs()[-1]}.log"
        return path.read_text() if path.exists() else f"<no log {path}>"

    def wait(self, timeout: float = 90) -> dict[str, Any]:
        """`hpceval status --json RUN` once the newest job of the run has ended."""
        job = self.jobs()[-1]
        wait_done(self.client, job, timeout)
        state = status(self.run_dir)
        assert state["state"] in TERMINAL, state
        return state

    def resume(self) -> str:
        """`hpceval resume RUN`, as a user runs it; the new job's id."""
        job = resumed(hpceval("resume", "--no-aggregate", str(self.run_dir)))
        assert self.jobs()[-1] == job, self.jobs()
        return job


def submit(client: CommandSlurmClient, work: Path, tasks: list[Task], *,
           server_shell: str = "", execution: dict[str, Any] | None = None,
           prepare: Callable[[Path], None] | None = None) -> Drill:
    """A one-model run of `tasks` against one oracle instance, submitted to the debug partition
    by alice; `prepare(model_dir)` runs (as root) while her job is held, before it may start."""
    owned_mkdir(work)
    oracle = [sys.executable, str(ORACLE), "--model", MODEL]
    specs = []
    for task in tasks:
        extra = {"script": str(HARNESS), "fault_file": str(work / f"{task.name}.fault"),
                 "requests": task.requests, "metrics": task.metrics}
        spec: dict[str, Any] = {"name": task.key, "params": {"extra": extra}}
        if task.timeout is not None:
            spec["timeout"] = task.timeout
        specs.append(spec)
    config = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": {"nodes": 1, "gpus_per_node": 0, "output_dir": str(work / "runs"),
                      "walltime": "00:05:00", "python": sys.executable, **(execution or {})},
        "deployment": {"served_model_name": MODEL, "health_timeout": 60,
                       "command": f"exec {shlex.join(oracle)} {server_shell}".rstrip()},
        "evaluation": {"tasks": specs},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    # The drills run with the default: a model's tasks concurrently (issue 22), so a fault in
    # one task meets the others mid-flight, not between them.
    assert load_config(path).spec.evaluation.max_concurrent_tasks >= len(tasks)
    run = submit_run(path, hold=prepare is not None)
    if prepare is not None:
        prepare(run.model_dir)
        released = user_command(USER, ["scontrol", "release", run.first_job], os.environ)
        assert released.returncode == 0, released.stderr
    return Drill(work, client, run.run_dir, run.model_dir)


def assert_done(drill: Drill, task: Task) -> None:
    """The task finished: done marker, results.json with every request answered, no failed.json."""
    task_dir = drill.task_dir(task)
    assert (task_dir / "done").is_file(), drill.log()
    assert not (task_dir / "failed.json").exists()
    results = json.loads((task_dir / "results.json").read_text())
    answered = [m["value"] for m in results["metrics"] if m["name"] == "answered"]
    assert answered == [1.0], results


def task_row(state: dict[str, Any], task: Task) -> dict[str, Any]:
    [model] = state["models"]
    [row] = [t for t in model["tasks"] if t["key"] == task.key]
    return dict(row)


def finished(drill: Drill, *tasks: Task) -> Snapshot:
    """The tasks are done; every finished task's files (bytes, mtime) to compare later."""
    for task in tasks:
        assert_done(drill, task)
    return snapshot_done(drill.model_dir)


def assert_resumed(drill: Drill, kept: Snapshot, skipped: list[Task], rerun: list[Task]) -> None:
    """`hpceval resume` with the fault gone: done tasks skipped, untouched; the rest done."""
    job = drill.resume()
    state = drill.wait()
    log = drill.log(job)
    assert state["state"] == "done", (state, log)
    for task in skipped:
        assert f"task {task.key}: done in an earlier job, skipped" in log, log
    assert_untouched(kept, drill.model_dir, [t.key for t in skipped])
    for task in rerun:
        assert f"task {task.key}: passed" in log, log
        assert_done(drill, task)


# --- 3. a harness exits non-zero ---------------------------------------------------------------

def test_harness_exits_non_zero_other_tasks_complete_resume_reruns_it(
        slurm_cluster: CommandSlurmClient, env: Path) -> None:
    a, b, c = Task("fault_a"), Task("fault_b"), Task("fault_c")
    work = env / "exit"
    owned_mkdir(work)
    (work / f"{b.name}.fault").write_text("exit 3\n")
    drill = submit(slurm_cluster, work, [a, b, c])
    state = drill.wait()
    first = drill.jobs()[0]
    log = drill.log(first)
    # the tasks after the failing one still ran and finished
    kept = finished(drill, a, c)
    failed = json.loads((drill.task_dir(b) / "failed.json").read_text())
    assert failed["stage"] == "harness" and failed["exit_code"] == 3, failed
    assert not (drill.task_dir(b) / "results.json").exists()
    harness_log = drill.task_dir(b) / "harness.log"
    assert "injected failure" in harness_log.read_text()
    # status: the model failed, naming the task, its exit status and where its log is
    [model] = state["models"]
    assert state["state"] == model["state"] == "failed", state
    assert model["reason"].startswith(f"1/3 task(s) failed: {b.key}: harness exited with "
                                      "status 3"), model
    assert str(harness_log) in model["reason"], model
    assert [task_row(state, t)["state"] for t in (a, b, c)] == ["done", "failed", "done"]
    assert f"1 of 3 task(s) failed: {b.key}" in log, log

    drill.fault_file(b).unlink()
    assert_resumed(drill, kept, [a, c], [b])


# --- 4. a harness hangs past its timeout -------------------------------------------------------

def test_harness_hangs_past_its_timeout_is_stopped_and_reported(
        slurm_cluster: CommandSlurmClient, env: Path) -> None:
    # The hanging harness obeys SIGTERM, as most do: `timeout` stops it at 4 s. One that
    # ignores SIGTERM is killed 60 s later (--kill-after) and reported as killed (status 137).
    a, b, c = Task("fault_a"), Task("fault_b", timeout=4), Task("fault_c")
    work = env / "hang"
    owned_mkdir(work)
    (work / f"{b.name}.fault").write_text("hang\n")
    drill = submit(slurm_cluster, work, [a, b, c])
    state = drill.wait()
    log = drill.log(drill.jobs()[0])
    kept = finished(drill, a, c)
    assert f"task {b.key}: timed out after 4s" in log, log
    failed = json.loads((drill.task_dir(b) / "failed.json").read_text())
    assert failed["exit_code"] == 124, failed
    assert "injected hang" in (drill.task_dir(b) / "harness.log").read_text()
    [model] = state["models"]
    assert state["state"] == model["state"] == "failed", state
    assert model["reason"].startswith(f"1/3 task(s) failed: {b.key}: harness timed out after "
                                      "4 s (stopped with SIGTERM)"), model
    assert task_row(state, b)["reason"] == failed["reason"]

    drill.fault_file(b).unlink()
    assert_resumed(drill, kept, [a, c], [b])


# --- 1. the only server process crashes mid-run ------------------------------------------------

def test_server_crash_mid_run_fails_the_job_naming_the_server(
        slurm_cluster: CommandSlurmClient, env: Path) -> None:
    # The oracle exits (status 3) after its 4th answer. The three tasks run at once; b and c
    # send nothing until a is done (fault `wait`), so a gets 2 answers, b and c (4 requests
    # each) share the other 2 and both lose the server. The server's fault is read from a file
    # when it starts, so the resumed job (the same script) gets a healthy server once the file
    # is gone.
    a, b, c = (Task("fault_a", requests=2), Task("fault_b", requests=4),
               Task("fault_c", requests=4))
    work = env / "crash"
    owned_mkdir(work)
    server_fault = work / "server.fault"
    server_fault.write_text("--die-after 4\n")

    def after_a(model_dir: Path) -> None:
        for task in (b, c):
            (work / f"{task.name}.fault").write_text(
                f"wait {model_dir / 'tasks' / a.key / 'done'}\n")

    drill = submit(slurm_cluster, work, [a, b, c],
                   server_shell=f"$(cat {shlex.quote(str(server_fault))} 2>/dev/null)",
                   prepare=after_a)
    state = drill.wait()
    log = drill.log(drill.jobs()[0])
    kept = finished(drill, a)
    server_log = drill.model_dir / "server" / "instance-0.log"
    assert "exiting with status 3" in server_log.read_text()
    assert "exited with status 3" in log, log  # the job log names the server and its status
    for task in (b, c):
        assert not (drill.task_dir(task) / "done").exists()
        assert not (drill.task_dir(task) / "results.json").exists()
    assert json.loads((drill.task_dir(b) / "failed.json").read_text())["stage"] == "harness"
    [model] = state["models"]
    assert state["state"] == model["state"] == "failed", state
    # status leads with the cause: which server, and where its log is
    node = log.split("exited with status 3")[0].rsplit(" on ", 1)[1].strip()
    assert model["reason"].startswith(
        f"model server instance 0 (head) on {node} (log: {server_log}) exited while tasks "
        "ran; "), model
    assert [task_row(state, t)["state"] for t in (a, b, c)] == ["done", "failed", "failed"]
    # concurrently: each task started before the first one ended
    starts = [log.index(f"task {t.key}: started") for t in (a, b, c)]
    assert max(starts) < log.index(f"task {a.key}: passed"), log

    server_fault.unlink()
    for task in (b, c):
        drill.fault_file(task).unlink()
    assert_resumed(drill, kept, [a], [b, c])


# --- 5. the results directory is not writable --------------------------------------------------

def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.fixture
def immutable(user_tmp: Path) -> Iterator[list[Path]]:
    """Directories made immutable (`chattr +i`) by the test; made mutable again at the end.
    An immutable directory refuses new files to anyone, its owner and root too (EPERM), like a
    read-only mount; the job cannot undo it as its owner could undo a chmod."""
    probe = user_tmp / "chattr-probe"  # on the file system of the runs
    probe.mkdir()
    tried = _run("chattr", "+i", str(probe))
    _run("chattr", "-i", str(probe))
    if tried.returncode != 0:
        pytest.skip(f"chattr +i does not work here: {tried.stderr.strip()}")
    paths: list[Path] = []
    try:
        yield paths
    finally:
        for path in paths:
            _run("chattr", "-i", str(path))


def test_results_directory_not_writable_fails_early_and_resume_finishes(
        slurm_cluster: CommandSlurmClient, env: Path, immutable: list[Path]) -> None:
    a, b = Task("fault_a"), Task("fault_b")
    work = env / "readonly"
    owned_mkdir(work)
    (work / f"{b.name}.fault").write_text("exit 3\n")
    drill = submit(slurm_cluster, work, [a, b])
    assert drill.wait()["state"] == "failed"  # job 1: a done, b failed (its harness)
    kept = finished(drill, a)
    drill.fault_file(b).unlink()

    # job 2: b's directory no longer takes files; the job stops before any task starts
    b_dir = drill.task_dir(b)
    assert _run("chattr", "+i", str(b_dir)).returncode == 0
    immutable.append(b_dir)
    second = drill.resume()
    state = drill.wait()
    log = drill.log(second)
    cause = f"results directory not writable: {b_dir} (Operation not permitted)"
    assert f"{cause}; nothing was run" in log, log
    assert "started (timeout" not in log, log  # no harness ran
    assert_untouched(kept, drill.model_dir, [a.key])
    [model] = state["models"]
    assert state["state"] == model["state"] == "failed", state
    assert model["reason"].startswith(f"{cause}; "), model

    # job 3: writable again; resume finishes, a untouched
    assert _run("chattr", "-i", str(b_dir)).returncode == 0
    assert_resumed(drill, kept, [a], [b])


# --- 6. a results write runs out of space ------------------------------------------------------

@pytest.fixture
def small_mount(user_tmp: Path) -> Iterator[list[Path]]:
    """tmpfs mounts the test makes (a disk that fills up: ENOSPC, as a quota gives EDQUOT);
    unmounted at the end."""
    probe = user_tmp / "mount-probe"
    probe.mkdir()
    tried = _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe))
    if tried.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {tried.stderr.strip()}")
    _run("umount", str(probe))
    mounts: list[Path] = []
    try:
        yield mounts
    finally:
        for path in mounts:
            _run("umount", "-l", str(path))


def test_disk_full_while_writing_results_keeps_them_whole_and_resume_finishes(
        slurm_cluster: CommandSlurmClient, env: Path, small_mount: list[Path]) -> None:
    # b's directory is a 96 KiB tmpfs: its harness output (20 KB of 1000 metrics) fits,
    # hpceval's parsed results.json (150 KB) does not, failed.json (4 KB) does again.
    a, b = Task("fault_a"), Task("fault_b", metrics=1000)
    work = env / "full"
    owned_mkdir(work)

    def mount_small_disk(model_dir: Path) -> None:
        b_dir = owned_mkdir(model_dir / "tasks" / b.key)
        owner = model_dir.stat()
        mounted = _run("mount", "-t", "tmpfs", "-o",
                       f"size=96k,mode=0755,uid={owner.st_uid},gid={owner.st_gid}", "tmpfs",
                       str(b_dir))
        assert mounted.returncode == 0, mounted.stderr
        small_mount.append(b_dir)

    drill = submit(slurm_cluster, work, [a, b], prepare=mount_small_disk)
    b_dir = drill.task_dir(b)
    state = drill.wait()
    kept = finished(drill, a)
    assert (b_dir / "harness" / "results_0.json").is_file()  # the harness itself finished
    # nothing half-written: no results.json, no done, no temporary file left behind
    assert not (b_dir / "results.json").exists() and not (b_dir / "done").exists()
    assert not list(b_dir.glob(".*.tmp")), list(b_dir.iterdir())
    failed = json.loads((b_dir / "failed.json").read_text())
    cause = f"could not write results into {b_dir}: No space left on device"
    assert failed["stage"] == "write" and failed["reason"] == cause, failed
    [model] = state["models"]
    assert state["state"] == model["state"] == "failed", state
    assert model["reason"] == f"1/2 task(s) failed: {b.key}: {cause}", model

    # space freed (the quota raised): resume reruns b only
    grown = _run("mount", "-o", "remount,size=4m", str(b_dir))
    assert grown.returncode == 0, grown.stderr
    assert_resumed(drill, kept, [a], [b])
