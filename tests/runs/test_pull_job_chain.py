"""Issue 38, N7: the run's pull job. A docker:// server image nothing staged is pulled by one
CPU job before any job that holds GPUs (they wait for it to end), with the fake Slurm:
submission order and dependencies, run.json, and resume submitting it again only when an
image is missing."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support.runs import configs, write_run_file
from support.slurm import FakeSlurm

from hpceval.config import ResolvedConfig, load_run
from hpceval.images import sif_name
from hpceval.runs.control import resume_run
from hpceval.runs.index import find_run
from hpceval.runs.jobs import read_jobs
from hpceval.runs.submit import submit_configs

IMAGE = "docker://example.org/server:1"
FILE = sif_name(IMAGE.removeprefix("docker://"))  # the staged and the pulled file


def pulling(tmp_path: Path, n: int, image_dir: Path | None = None) -> list[ResolvedConfig]:
    # offline: false, as a site whose compute nodes reach a registry (through its proxy);
    # offline runs must stage their images (the preflight refuses a pull then)
    execution = {"type": "slurm", "container_runtime": "apptainer", "offline": False,
                 **({"image_dir": str(image_dir)} if image_dir else {})}
    return configs(tmp_path, n, execution=execution,
                   deployment={"type": "command", "image": IMAGE, "runtime": "container",
                               "command": "exec my-server --port $PORT"})


def test_the_pull_job_comes_first_and_every_gpu_job_waits_for_it(tmp_path: Path,
                                                                 fake: FakeSlurm) -> None:
    result = submit_configs(pulling(tmp_path, 3), fake)
    run_dir = result.run_dir
    pull, array, _ = (s["id"] for s in fake.submits)
    assert [(s["script"].name, s["dependency"]) for s in fake.submits] == [
        ("pull.sbatch", None), ("sweep.sbatch", f"afterany:{pull}"),
        ("aggregate.sbatch", f"afterany:{array}")]
    assert result.roles == ("main", "aggregate", "pull")
    assert [e.role for e in read_jobs(run_dir).chain] == ["pull", "main", "aggregate"]
    image = f"{run_dir}/images/{FILE}"
    assert json.loads((run_dir / "run.json").read_text())["pulled_images"] == [image]
    script = (run_dir / "pull.sbatch").read_text()
    assert script.count(f"apptainer pull --force \"${{tmp}}\" {IMAGE}") == 1  # 3 models, 1 pull
    assert "#SBATCH --gpus" not in script
    for i in range(3):  # the elements run the file, and pull nothing
        element = (run_dir / f"models/model-{i:02d}/job.sh").read_text()
        assert image in element and "apptainer pull" not in element


def test_a_staged_image_needs_no_pull_job(tmp_path: Path, fake: FakeSlurm) -> None:
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    (image_dir / FILE).write_bytes(b"staged")
    result = submit_configs(pulling(tmp_path, 1, image_dir), fake)
    assert [s["script"].name for s in fake.submits] == ["job.sbatch"]
    assert not (result.run_dir / "pull.sbatch").exists()


def test_resume_pulls_again_only_what_is_missing(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(pulling(tmp_path, 1), fake)
    pull, job = (s["id"] for s in fake.submits)
    # the pull failed, and the job found no image
    fake.states.update({pull: "FAILED", job: "FAILED"})
    entries = resume_run(find_run(result.invocation_id), fake)
    new_pull, resubmit = fake.submits[2:]
    assert new_pull["script"].name == "pull.sbatch" and new_pull["dependency"] is None
    assert resubmit["dependency"] == f"afterany:{new_pull['id']}"
    assert sorted(e.role for e in entries) == ["main", "pull"]
    # this time the image is there (the pull worked, the job timed out): no pull job
    fake.states.update({new_pull["id"]: "COMPLETED", resubmit["id"]: "TIMEOUT"})
    images = result.run_dir / "images"
    images.mkdir()
    (images / FILE).write_bytes(b"image")
    resume_run(find_run(result.invocation_id), fake)
    assert [s["script"].name for s in fake.submits[4:]] == ["job.sbatch"]


def test_a_harness_image_is_pulled_by_the_pull_job_and_run_as_a_file(tmp_path: Path,
                                                                      fake: FakeSlurm) -> None:
    """hpc-admin-2 D5: a harness's docker:// image was converted by the runtime for every task,
    inside the GPU job; it is pulled once, ahead, like a server's, and every task runs the file."""
    harness = "docker://example.org/harness:1"
    run_file = write_run_file(tmp_path, 2, execution={
        "type": "slurm", "container_runtime": "apptainer", "offline": False})
    run = yaml.safe_load(run_file.read_text())
    for task in run["evaluation"]["tasks"]:
        task["container"] = harness
    run_file.write_text(yaml.safe_dump(run))
    result = submit_configs(load_run(run_file, profile="local-dev", check_environment=False),
                            fake)
    run_dir = result.run_dir
    assert [s["script"].name for s in fake.submits][:2] == ["pull.sbatch", "sweep.sbatch"]
    image = f"{run_dir}/images/{sif_name(harness.removeprefix('docker://'))}"
    pull_job = (run_dir / "pull.sbatch").read_text()
    assert pull_job.count(f"apptainer pull --force \"${{tmp}}\" {harness}") == 1
    for i in range(2):
        element = (run_dir / f"models/model-{i:02d}/job.sh").read_text()
        assert element.count(f"      {image}\n") == 2  # both tasks run the file
        assert harness not in element  # nothing converts the reference in the GPU job
