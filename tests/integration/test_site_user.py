"""A sweep run by an ordinary user of the site in a box, from the command line: alice (made by
scripts/slurm/start-cluster.sh, home 0700, project group hpcproj) submits, follows and reads a
two-model sweep in her home, in a login shell's environment (nothing of root's). Slurm's own
record says the jobs were hers; what they wrote is hers and not world-readable; bob, of the
same project, can neither read her results nor see her run. The profile sends the job that
needs no GPU (aggregation) to the site's CPU-only partition, as sites ask: it runs on the node
without GPUs.

Models: tests/fakes/oracle_server.py behind `command` deployments; task: the ask harness."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.site_users import OTHER, USER, as_user, hpceval, sacct_ended
from test_controller import ORACLE, sweep_config

pytestmark = pytest.mark.slurm

def test_an_ordinary_user_runs_a_sweep_from_her_home(home_dir: Path) -> None:
    config: dict[str, Any] = sweep_config(home_dir / "runs", ORACLE)
    config["execution"]["cpu_partition"] = "cpu"
    run_file = home_dir / "run.yaml"
    run_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    os.chown(run_file, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)

    submitted = hpceval(USER, "submit", str(run_file))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr

    deadline, runs = time.monotonic() + 180, []
    while time.monotonic() < deadline:
        status = hpceval(USER, "status", "--json")
        assert status.returncode == 0, status.stderr
        # hers from this test: alice may have other runs (the README demo submits as her)
        runs = [run for run in json.loads(status.stdout)
                if Path(run["run_dir"]).parent == home_dir / "runs"]
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
    placed = subprocess.run(["sacct", "-n", "-P", "-X", "-j", jobs["aggregate"], "-o",
                             "Partition,NodeList,AllocTRES"], capture_output=True, text=True,
                            check=True).stdout.split("|")
    assert placed[:2] == ["cpu", "node4"] and "gpu" not in placed[2], placed
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
