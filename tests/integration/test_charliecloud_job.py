"""A real Slurm job on the dev cluster, submitted by an ordinary user of the site in a box
(alice, from a login shell's environment, her run on scratch), whose harness runs in a
Charliecloud container: the real lm-evaluation-harness, in the SquashFS image that
scripts/charliecloud/image.sh packs (the podman harness image's root filesystem: Debian minbase
+ Debian's python3.11, the venv's site-packages bound read-only), started by ``ch-run`` on the
compute node, mounted with squashfuse, against the job's server (the deterministic oracle
behind the in-job proxy, on the host), offline.

It must score exactly what the same task scores on the host (tests/integration/
test_lm_eval_job.py: the answer key's numbers), and the harness must really have run in the
image: the job's PATH holds a Python but no ``lm_eval`` (only the image has one), so a harness
started on the host would fail; the job log names ``ch-run`` and the image; Slurm's record says
the job was alice's, and what the container wrote is hers.

Needs ch-run (Debian's charliecloud-runtime), squashfuse, mksquashfs, podman (root, to build the
image the first time); skipped without them unless HPCEVAL_REQUIRE_CHARLIECLOUD=1 (CI)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import charliecloud
from support.lm_eval_env import FAKES, MODEL, TASK_NAME, answer_key, require_lm_eval, write_task_dir
from support.site import SCRATCH
from support.site_users import USER, as_user, sacct_ended, submitted

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.vllm_support import wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

QUALIFIED = f"lm-eval-upstream.{TASK_NAME}"
LIMIT = 10
FILTERS = ("strict-match", "flexible-extract")
TIMEOUT = 300  # seconds; about 60 once a node is free


@pytest.fixture(scope="module")
def image() -> Path:
    """The harness image as a SquashFS file, built once per machine (content-hashed name), with
    the site's scratch as a mount point (ch-run 0.31 binds only onto folders the image has)."""
    return charliecloud.image("harness", sys.prefix, SCRATCH)


def _run_file(work: Path, image: Path) -> Path:
    tasks_dir = write_task_dir(work / "lm_eval_tasks")
    site = sysconfig.get_paths()["purelib"]
    run = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": {"nodes": 1, "output_dir": str(work / "runs"),
                      "container_runtime": "charliecloud",
                      # scratch's top folder (the image has it): the run's folders below it
                      # need no mount point of their own
                      "extra_binds": [str(SCRATCH), f"{site}:{site}:ro"]},
        "deployment": {"served_model_name": MODEL, "health_timeout": 120,
                       "command": f"exec python3 {FAKES / 'oracle_server.py'} --model {MODEL}"},
        "evaluation": {"params": {"limit_samples": LIMIT, "parallelism": 4},
                       "tasks": [{"name": QUALIFIED, "allow_unlisted": True,
                                  "container": str(image),
                                  "params": {"extra": {"include_path": str(tasks_dir)}}}]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


@pytest.fixture
def scratch_dir(home_dir: Path) -> Iterator[Path]:
    """alice's folder on the site's scratch, which every node mounts (each node's /tmp is its
    own), and a mount point of the image (ch-run 0.31 binds only onto folders the image has, and
    her home's are not in it; runs belong on scratch anyway, docs/containers.md)."""
    work = SCRATCH / f"hpceval-{USER}-{uuid.uuid4().hex[:8]}"
    made = as_user(USER, "mkdir", "-m", "0700", str(work))
    assert made.returncode == 0, made.stderr
    try:
        yield work
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


def test_a_harness_in_a_charliecloud_image_on_a_compute_node_scores_the_answer_key(
        image: Path, slurm_cluster: CommandSlurmClient, scratch_dir: Path) -> None:
    require_lm_eval()
    path = f"{charliecloud.python_only_bin(scratch_dir)}:/usr/local/bin:/usr/bin:/bin"
    assert shutil.which("lm_eval", path=path) is None  # only the image has a harness
    run_file = _run_file(scratch_dir, image)
    owner = pwd.getpwnam(USER)
    for made in [run_file, *scratch_dir.rglob("*")]:
        os.chown(made, owner.pw_uid, owner.pw_gid)

    out = as_user(USER, sys.executable, "-m", "hpceval", "submit", str(run_file),
                  env={"PATH": path})
    job_id, run = submitted(out)
    state = wait(slurm_cluster, job_id, run, timeout=TIMEOUT)
    model_dir = run / "models" / MODEL
    logs = "\n".join(p.read_text() for p in model_dir.glob("slurm-*.log"))
    task_dir = model_dir / "tasks" / QUALIFIED
    harness_log = task_dir / "harness.log"
    said = harness_log.read_text()[-3000:] if harness_log.exists() else ""
    assert state == "COMPLETED", logs[-4000:] + said
    assert sacct_ended(job_id) == ({USER}, {"COMPLETED"})  # Slurm's record: alice's job

    # the job ran the harness through ch-run, from the SquashFS file
    [line] = [ln for ln in logs.splitlines() if "harness in a container:" in ln]
    assert "ch-run" in line and str(image) in line, line
    parsed: dict[str, Any] = json.loads((task_dir / "results.json").read_text())
    [raw_file] = (task_dir / "harness").rglob("results_*.json")
    raw = json.loads(raw_file.read_text())["results"][TASK_NAME]
    expected = answer_key.expected_scores(answer_key.load_items()[:LIMIT])
    metrics = {m["filter"]: m for m in parsed["metrics"] if m["name"] == "exact_match"}
    assert set(metrics) == set(FILTERS)
    for filt in FILTERS:  # exactly the host's numbers (the answer key), not approximately
        assert metrics[filt]["value"] == raw[f"exact_match,{filt}"] == expected[filt]
        assert metrics[filt]["n_samples"] == LIMIT
    # what the container wrote is hers
    assert raw_file.stat().st_uid == owner.pw_uid
    # nothing that mounted or ran the image outlives the job (ch-run mounts it in its own
    # mount namespace, through libsquashfuse: a process, if anything, is what would be left)
    left = subprocess.run(["pgrep", "-af", str(image)], capture_output=True, text=True,
                          check=False)
    assert left.stdout == "", left.stdout
