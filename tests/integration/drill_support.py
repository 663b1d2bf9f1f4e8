"""Shared by the fault drills on the real Slurm dev cluster (test_resume_drills.py,
test_fault_drills_cancel.py, test_fault_drills_node.py and others): submit a run, wait on
its jobs, read the oracle server's request log, ask `hpceval status` what it says, and prove
that finished results were not touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.site_users import USER, resumed, submitted, user_command

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.runs.jobs import read_jobs

ROOT = Path(__file__).resolve().parents[2]
ORACLE = ROOT / "tests" / "fakes" / "oracle_server.py"
HOLDING_SBATCH = ROOT / "tests" / "fakes" / "holding_sbatch"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")


# --- a submitted run ---------------------------------------------------------------------------

@dataclass
class Submitted:
    run_dir: Path
    model_dir: Path
    first_job: str
    submitted_at: float  # time.monotonic()

    def jobs(self) -> list[str]:
        """Every job of the run: the first, resumes, successors the jobs submitted."""
        return read_jobs(self.run_dir).ids

    def log(self, job_id: str) -> str:
        path = self.model_dir / f"slurm-{job_id}.log"
        return path.read_text() if path.exists() else f"<no log {path}>"

    def task_dir(self, key: str) -> Path:
        return self.model_dir / "tasks" / key


def submit_run(run_file: Path, *, hold: bool = False) -> Submitted:
    """`hpceval submit` of a single-model run file, as the site's ordinary user (its folders
    must be hers: the fixtures user_tmp and user_tmp_factory); ``hold``: the job stays PENDING
    (JobHeldUser: sbatch --hold, tests/fakes/holding_sbatch) until the drill cancels it. A
    resume submits unheld."""
    started = time.monotonic()
    path = f"{HOLDING_SBATCH}{os.pathsep}{os.environ['PATH']}"
    job, run_dir = submitted(hpceval("submit", str(run_file),
                                     env={"PATH": path} if hold else None))
    [model] = (run_dir / "models").iterdir()
    return Submitted(run_dir, model, job, started)


def sbatch(*args: str, user: str = USER) -> str:
    """`sbatch --parsable ARGS` (a script, or options and --wrap) as one of the site's ordinary
    users (alice unless named), in this process's environment (sbatch passes it on to the
    job): the job's id."""
    done = user_command(user, ["sbatch", "--parsable", *args], os.environ)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def resume(run_dir: Path) -> str:
    """`hpceval resume RUN` as the site's ordinary user: the id of the job it submitted."""
    return resumed(hpceval("resume", str(run_dir)))


def job_state(client: CommandSlurmClient, job_id: str) -> str | None:
    record = client.sacct([job_id]).get(job_id)
    return None if record is None else record.state.split()[0]


def wait_done(client: CommandSlurmClient, job_id: str, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(client, job_id)
        if state in FINAL:
            return state
        time.sleep(0.5)
    client.cancel([job_id])
    raise AssertionError(f"job {job_id} did not end in {timeout} s")


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(interval)


def leftovers(marker: str) -> list[str]:
    """Processes on this machine (every node of the dev cluster) whose command line has
    `marker`, as `pgrep -af` lists them."""
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True, check=False)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def assert_none_left(marker: str, timeout: float = 30) -> None:
    """No process with `marker` survives the end of its job. Slurm sends SIGKILL KillWait
    (2 s on the dev cluster) after a cancel's SIGTERM, and a loaded machine takes longer to
    reap: wait for the processes to go, failing with those left after `timeout`."""
    deadline = time.monotonic() + timeout
    while left := leftovers(marker):
        assert time.monotonic() < deadline, f"processes left {timeout} s after the job: {left}"
        time.sleep(0.5)


# --- the oracle server -------------------------------------------------------------------------

def oracle_command(model: str, request_log: Path, *, delay: float = 0.0,
                   die_after: int | None = None, die_on: str | None = None) -> str:
    """A `command` deployment running tests/fakes/oracle_server.py; `die_after` answers, then
    the instance exits (status 3): every instance, or only the one on node `die_on`."""
    oracle = [sys.executable, str(ORACLE), "--model", model, "--request-log",
              str(request_log), "--delay", str(delay)]
    command = f"exec {shlex.join(oracle)}"
    if die_after is None:
        return command
    if die_on is None:
        return f"{command} --die-after {die_after}"
    # Only the instance whose srun step runs on `die_on` gets the flag.
    return (f'if [ "${{SLURMD_NODENAME:-}}" = {shlex.quote(die_on)} ]; then '
            f"set -- --die-after {die_after}; fi; {command} \"$@\"")


def answered(request_log: Path) -> list[dict[str, Any]]:
    """The server's request log: one dict per answered generation request."""
    if not request_log.exists():
        return []
    return [json.loads(line) for line in request_log.read_text().splitlines() if line]


def hashes_by_job(request_log: Path) -> dict[str, list[str]]:
    by_job: dict[str, list[str]] = {}
    for line in answered(request_log):
        by_job.setdefault(str(line["job"]), []).append(line["hash"])
    return by_job


# --- what hpceval says -------------------------------------------------------------------------

def hpceval(*args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The CLI as the site's ordinary user (support/site_users.USER) runs it, in this process's
    environment (catalogue, caches, PATH: as a site module sets them) but her HOME and XDG
    folders; ``env``: what differs. Her jobs, her run index, her files."""
    return user_command(USER, [sys.executable, "-m", "hpceval", *args],
                        {**os.environ, **(env or {})}, timeout=timeout)


def submit_file(run_file: Path, *args: str) -> tuple[str, Path]:
    """`hpceval submit RUN_FILE ARGS` as the site's ordinary user: (first job, run directory)."""
    return submitted(hpceval("submit", str(run_file), *args))


def wait_status(run_dir: Path, states: set[str], timeout: float) -> dict[str, Any]:
    """`hpceval status --json RUN` (as the run's user) once its state is one of ``states``."""
    deadline = time.monotonic() + timeout
    while True:
        shown = status(run_dir)
        if shown["state"] in states:
            return shown
        assert time.monotonic() < deadline, f"run stayed {shown['state']}: {shown['reason']}"
        time.sleep(1.0)


def status(run_dir: Path) -> dict[str, Any]:
    """`hpceval status --json RUN` for one run."""
    done = hpceval("status", "--json", str(run_dir))
    assert done.returncode == 0, done.stderr
    [run] = json.loads(done.stdout)
    assert isinstance(run, dict)
    return run


# --- finished results stay as they were -----------------------------------------------------------

Snapshot = dict[str, tuple[str, int]]  # path under the model dir -> (sha256, mtime_ns)


def snapshot_done(model_dir: Path) -> Snapshot:
    """Every file of every finished task (those with a `done` marker)."""
    out: Snapshot = {}
    for done in sorted(model_dir.glob("tasks/*/done")):
        for path in sorted(p for p in done.parent.rglob("*") if p.is_file()):
            st = path.stat()
            out[str(path.relative_to(model_dir))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns)
    return out


def assert_untouched(before: Snapshot, model_dir: Path, keys: Sequence[str] = ()) -> None:
    """The files `before` listed have the same bytes and mtime now; `keys` must be among them."""
    for key in keys:
        assert any(p.startswith(f"tasks/{key}/") for p in before), (key, sorted(before))
    after = snapshot_done(model_dir)
    changed = {p: (v, after.get(p)) for p, v in before.items() if after.get(p) != v}
    assert not changed, f"finished results changed: {changed}"


@contextmanager
def own_catalogue(root: Path, file_name: str, catalogue: str, *,
                  own_index: bool = False) -> Iterator[Path]:
    """``root`` as one test's shared storage (the dev cluster's nodes are this machine): its
    own task catalogue file (HPCEVAL_TASKS_PATH), its own XDG cache, no profile from the
    caller's environment; ``own_index``: its own run index too (HPCEVAL_CACHE_DIR)."""
    (root / "catalogue").mkdir()
    (root / "catalogue" / file_name).write_text(catalogue)
    mp = pytest.MonkeyPatch()
    mp.setenv("HPCEVAL_TASKS_PATH", str(root / "catalogue"))
    mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
    if own_index:
        mp.setenv("HPCEVAL_CACHE_DIR", str(root / "hpceval-cache"))
    mp.delenv("HPCEVAL_PROFILE", raising=False)
    try:
        yield root
    finally:
        mp.undo()
