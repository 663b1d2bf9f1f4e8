"""Issue 38, N7, on the dev cluster: a docker:// server image that nothing staged is pulled by
the run's CPU pull job, and the job that holds GPUs starts only once that job has ended and
pulls nothing itself. The pull tool is the strict fake apptainer (tests/fakes/apptainer) with
a fake registry: Apptainer cannot run here. Its `exec` of a server is not a call it accepts,
so the model's job then fails at its server: this test is about what happens before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from support.site_users import submitted

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.images import sif_name
from tests.integration.drill_support import hpceval, wait_done

pytestmark = pytest.mark.slurm

FAKES = Path(__file__).resolve().parents[1] / "fakes"
REF = "example.org/server:1"


def test_the_pull_job_pulls_before_the_gpu_job_starts(
        slurm_cluster: CommandSlurmClient, ask_env: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_bin = ask_env / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "apptainer").symlink_to(FAKES / "apptainer")
    registry = ask_env / "registry.json"
    registry.write_text(json.dumps({"images": {REF: {"digest": "sha256:" + "1" * 64,
                                                     "files": {}, "labels": {}}}}))
    calls = ask_env / "apptainer-calls.jsonl"
    # sbatch passes this environment on: the fake is first on PATH in every job
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_REGISTRY", str(registry))
    monkeypatch.setenv("FAKE_APPTAINER_LOG", str(calls))
    run_file = ask_env / "run.yaml"
    run_file.write_text(yaml.safe_dump({
        "defaults": [{"execution": "local-dev"}],
        # online nodes (a site whose nodes reach a registry through its proxy): offline runs
        # must stage their images first, and the preflight refuses a pull
        "execution": {"gpus_per_node": 1, "output_dir": str(ask_env / "runs"),
                      "container_runtime": "apptainer", "offline": False,
                      "walltime": "00:05:00"},
        "deployment": {"type": "command", "runtime": "container", "image": f"docker://{REF}",
                       "health_timeout": 60,
                       "command": "exec my-server --port $PORT", "served_model_name": "m"},
        "evaluation": {"tasks": [{"name": "ask_a", "params": {"extra": {
            "question": "What is 2+2?", "answer": "4"}}}]},
    }), encoding="utf-8")
    out = hpceval("submit", str(run_file))  # as alice
    _, run_dir = submitted(out)
    assert "pull job" in out.stdout
    chain = json.loads((run_dir / "jobs.json").read_text())["chain"]
    roles = {e["role"]: e["id"] for e in chain}
    pull, main = roles["pull"], roles["main"]
    assert wait_done(slurm_cluster, pull, timeout=120) == "COMPLETED"
    assert wait_done(slurm_cluster, main, timeout=180) in {"FAILED", "COMPLETED"}
    records = slurm_cluster.sacct([pull, main])
    # the GPU job started once the pull had ended, not before
    assert records[main].start is not None and records[pull].end is not None
    assert records[main].start >= records[pull].end
    image = run_dir / "images" / sif_name(REF)
    assert json.loads((run_dir / "run.json").read_text())["pulled_images"] == [str(image)]
    assert image.stat().st_size > 0 and "hpceval-fake-sif" in image.read_text()
    pulls = [json.loads(line)["argv"] for line in calls.read_text().splitlines()
             if json.loads(line)["argv"][:1] == ["pull"]]
    assert len(pulls) == 1, pulls  # by the pull job; the model's job pulled nothing
    log = next((run_dir / "logs").glob("pull-*.log")).read_text()
    assert "every image is here" in log, log
    assert not list((run_dir / "images").glob("*.tmp-*"))
