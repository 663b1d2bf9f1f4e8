"""The site in a box's ordinary users (alice, bob: scripts/slurm/start-cluster.sh makes them):
running commands as them, in a login shell's environment, and reading Slurm's record of their
jobs. The ``home_dir`` fixture (a folder in alice's home) is in tests/integration/conftest.py."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

USER, OTHER = "alice", "bob"
ROOT = Path(__file__).resolve().parents[2]
LIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")


def as_user(user: str, *args: str, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``args`` run as ``user`` in a login shell's environment: their HOME, PATH with the
    project's venv first (as a site module would set it), and none of this process's;
    ``env``: what differs from that."""
    home = pwd.getpwnam(user).pw_dir
    env = {"HOME": home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8", "SHELL": "/bin/bash",
           "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
           "HPCEVAL_TASKS_PATH": str(ROOT / "tests" / "fakes" / "ask-harness.yaml"),
           **(env or {})}
    return _run_as(user, list(args), env, cwd=cwd or Path(home), timeout=120)


def hpceval(user: str, *args: str) -> subprocess.CompletedProcess[str]:
    return as_user(user, sys.executable, "-m", "hpceval", *args)


# What a user's login shell sets for themselves: never carried over from this (root's) process.
OWN_VARIABLES = ("HOME", "USER", "LOGNAME", "MAIL", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME",
                 "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "PWD", "OLDPWD")


def user_command(user: str, argv: list[str], env: Mapping[str, str], *,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``argv`` run as ``user`` with ``env`` (this process's, as a site module would have set
    it up), but the user's own HOME, USER and caches; from their home folder."""
    return _run_as(user, argv, _login_env(user, env), cwd=Path(pwd.getpwnam(user).pw_dir),
                   timeout=timeout)


def submitted(out: subprocess.CompletedProcess[str]) -> tuple[str, Path]:
    """(job id, run directory) that `hpceval submit` printed; the test fails on anything else
    (its stderr and stdout shown)."""
    assert out.returncode == 0, out.stderr + out.stdout
    job = re.search(r"submitted \S+: (?:array )?job (\d+)", out.stdout)
    run_dir = re.search(r"^run directory: (.+)$", out.stdout, re.M)
    assert job and run_dir, out.stdout
    return job.group(1), Path(run_dir.group(1))


def resumed(out: subprocess.CompletedProcess[str]) -> str:
    """The id of the (first) main job that `hpceval resume` printed; the test fails on anything
    else (its stderr and stdout shown)."""
    assert out.returncode == 0, out.stderr + out.stdout
    job = re.search(r": resumed as \S+ job (\d+)", out.stdout)
    assert job, out.stdout
    return job.group(1)


def user_popen(user: str, argv: list[str], env: Mapping[str, str]
               ) -> subprocess.Popen[str]:
    """user_command, started and not waited for (stdout and stderr piped): several processes
    of one user at once."""
    return subprocess.Popen(_argv_as(user, argv, _login_env(user, env)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=pwd.getpwnam(user).pw_dir)


def _login_env(user: str, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the user's own HOME, USER and caches instead of this process's."""
    own = {k: v for k, v in env.items() if k not in OWN_VARIABLES}
    own.update({"HOME": pwd.getpwnam(user).pw_dir, "USER": user, "LOGNAME": user})
    return own


def _run_as(user: str, argv: list[str], env: Mapping[str, str], *, cwd: Path,
            timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv_as(user, argv, env), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, check=False)


def _argv_as(user: str, argv: list[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` as ``user`` with exactly ``env`` (nothing of this root process's)."""
    return ["runuser", "-u", user, "--", "env", "-i",
            *(f"{k}={v}" for k, v in env.items()), *argv]


@contextmanager
def reading_as(user: str) -> Iterator[None]:
    """This (root) process reads as ``user`` within: hpceval's readers of a job's files (the
    ledger, the server's load) trust only files of the reading user's, as they would be when
    the user runs hpceval; root's real uid stays, so the effective one comes back after."""
    os.seteuid(pwd.getpwnam(user).pw_uid)
    try:
        yield
    finally:
        os.seteuid(0)


class UserTmp:
    """Folders of ``user``'s own (0700) on the site's shared scratch, as a user's work folder
    on a parallel file system is: jobs the user submits write there, and this (root) process
    reads and writes everything. One folder per pytest session (its pid); the folders of
    sessions that have ended are removed when a new one starts, as pytest keeps only its newest
    tmp folders (a session still running beside this one, a CI run's, keeps its own)."""

    def __init__(self, user: str, scratch: Path) -> None:
        self.user = user
        top = scratch / "hpceval-tests"
        top.mkdir(mode=0o755, exist_ok=True)
        for old in top.glob("session-*"):
            pid = old.name.removeprefix("session-")
            if not (pid.isdigit() and Path(f"/proc/{pid}").exists()):
                shutil.rmtree(old, ignore_errors=True)
        self.base = top / f"session-{os.getpid()}"
        self.base.mkdir(mode=0o755)

    def mktemp(self, name: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.base))
        entry = pwd.getpwnam(self.user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        path.chmod(0o700)
        return path


def owned_mkdir(path: Path) -> Path:
    """``path`` made (with its parents) as mkdir -p would, each new folder given to the owner
    of the folder above it: a folder this (root) process makes in a user's folder is the
    user's, as if she had made it, so her jobs may write there."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir()
        st = folder.parent.stat()
        os.chown(folder, st.st_uid, st.st_gid)
    return path


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
