"""A server's image on a cluster (issue 21 defect 4, hpc-admin-2 N7): a staged image runs from
image_dir; an unstaged one is pulled once for the run, before any GPU job (the pull job), into
the run's images folder with the runtime's scratch variables; a GPU job stops at once when its
image was not pulled, and neither a directory nor an empty file passes for an image.
Rendered, then the pull block and the image checks run in bash with strict fakes."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from render_helpers import SERVER_MODEL, SERVER_RUN, RenderFn, backend_env
from support import FAKES

MODEL, RUN = SERVER_MODEL, SERVER_RUN


DOCKER_IMAGE = "docker://vllm/vllm-openai:v0.32.0"


@pytest.mark.parametrize(("runtime", "staged"), [("apptainer", "vllm_vllm-openai_v0.32.0.sif"),
                                                 ("pyxis", "vllm_vllm-openai_v0.32.0.sqsh")])
def test_a_staged_server_image_is_run_from_image_dir(render: RenderFn, render_pull: RenderFn,
                                                     tmp_path: Path, runtime: str,
                                                     staged: str) -> None:
    """Issue 21, defect 4: not pulled and converted by every instance at run time."""
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    run = {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 2, "image": DOCKER_IMAGE}}
    overrides = [f"execution.image_dir={image_dir}", f"execution.container_runtime={runtime}"]
    assert "vllm/vllm-openai:v0.32.0" in render_pull("slurm", run, overrides)  # nothing staged
    (image_dir / staged).write_bytes(b"staged image")
    after = render("slurm", run, overrides)
    assert str(image_dir / staged) in after and render_pull("slurm", run, overrides) == ""
    launches = after[after.index("launch_server 0 head"):]
    assert "docker://vllm" not in launches and "--container-image=vllm/" not in after


def image_check(script: str) -> str:
    """The rendered usable_image_file function (templates/image_file.j2) that a pull block or
    a job's check of its pulled images calls."""
    start = script.index("\nusable_image_file() {") + 1
    return script[start:script.index("\n}\n", start) + 3]


def pull_block(script: str) -> str:
    start = script.index("\nPULL_FAILED=()") + 1
    end = script.index("\nfi\n", script.index("could not pull", start)) + 4
    return script[start:end]


PULLED = "/inv-0123456789abcdef/images/vllm_vllm-openai_v0.32.0"


@pytest.mark.parametrize(("runtime", "suffix", "tools", "scratch_env"), [
    ("apptainer", ".sif", ["apptainer"], ["APPTAINER_CACHEDIR", "APPTAINER_TMPDIR"]),
    ("pyxis", ".sqsh", ["enroot"], ["ENROOT_CACHE_PATH", "ENROOT_TEMP_PATH"]),
    ("charliecloud", ".sqfs", ["ch-image", "ch-convert"], ["CH_IMAGE_STORAGE"])])
def test_an_unstaged_server_image_is_pulled_once_for_the_run(
        render: RenderFn, render_pull: RenderFn, tmp_path: Path, runtime: str, suffix: str,
        tools: list[str], scratch_env: list[str]) -> None:
    """Issue 21, defect 4, second part, and issue 38, N7: nothing staged, so the run's pull
    job (a CPU job that every job holding GPUs waits for) pulls the image ONCE, under a lock,
    and every instance runs the file; the GPU job pulls nothing. Two pulls at once (a resumed
    run's pull job beside the first) pull it once between them, with their temporary files on
    the node's scratch, not on shared storage. The pull line runs the strict fakes of
    tests/fakes (behind a wrapper that is slow and records each call and its scratch
    variables), so its words are the ones the real tools accept."""
    run = {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 2, "image": DOCKER_IMAGE}}
    overrides = [f"execution.container_runtime={runtime}"]
    script = render("slurm", run, overrides)
    pulled = PULLED + suffix
    launches = script[script.index("SERVER_DIR="):]
    assert pulled in launches and "docker://vllm" not in launches
    assert "vllm/vllm-openai" not in launches.replace(pulled, "")  # 4 instances: one file
    assert "vllm/vllm-openai" not in script.replace(pulled, "")  # the GPU job pulls nothing
    assert script.index("PULLED_IMAGES=") < script.index("launch_server 0 head")
    pull_job = render_pull("slurm", run, overrides)
    assert "#SBATCH --gpus" not in pull_job and "#SBATCH --cpus-per-task=4" in pull_job
    block = pull_block(pull_job)
    # run the block twice at once
    run_dir = tmp_path / "run"
    (run_dir / "images").mkdir(parents=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    calls = tmp_path / "calls"
    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps({"images": {"vllm/vllm-openai:v0.32.0": {
        "digest": "sha256:" + "5" * 64, "files": {}, "labels": {}}}}))
    shown = " ".join(f"{name}=${{{name}:-}}" for name in scratch_env)
    for tool in tools:
        (fake_bin / tool).write_text(
            "#!/bin/bash\n"
            f'echo "{tool} $* {shown}" >> {calls}\n'
            f'sleep 1; exec {FAKES / tool} "$@"\n')
        (fake_bin / tool).chmod(0o755)
    file = run_dir / "images" / Path(pulled).name
    body = ("log() { echo \"$*\"; }\n" + backend_env(script) + image_check(pull_job)
            + re.sub(r"^PULL_FILE=.*$", f"PULL_FILE={file}", block, flags=re.M)
            + 'echo "failed=${#PULL_FAILED[@]}"\n')
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "RUN_DIR": str(run_dir),
           "TMPDIR": str(scratch), "FAKE_REGISTRY": str(registry)}
    jobs = [subprocess.Popen(["bash", "-c", body], env={**env, "SLURM_JOB_ID": str(j)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for j in (11, 12)]
    outs = [p.communicate(timeout=60)[0] for p in jobs]
    assert all(p.returncode == 0 and out.endswith("failed=0\n")
               for p, out in zip(jobs, outs, strict=True)), outs
    assert json.loads(file.read_text())["name"] == "vllm/vllm-openai:v0.32.0"  # the fakes'
    lines = calls.read_text().splitlines()
    # one pull between the two jobs (charliecloud: ch-image pull, then ch-convert)
    assert [line.split()[0] for line in lines] == tools
    assert "vllm/vllm-openai:v0.32.0" in lines[0] and ".tmp-1" in lines[-1]
    for line in lines:  # the node's scratch, not shared storage nor ~/.apptainer's cache
        for name in scratch_env:
            assert f"{name}={scratch}/hpceval-pull." in line, line
    assert not list((run_dir / "images").glob("*.tmp-*"))  # nothing half-written left
    assert list(scratch.iterdir()) == []  # and nothing left on the node


def test_a_gpu_job_stops_at_once_when_its_image_was_not_pulled(render: RenderFn,
                                                               tmp_path: Path) -> None:
    """Issue 38, N7: the pull job failed, so the image is missing: the job that holds GPUs
    says so (job-failure, which status shows) and stops, instead of pulling it itself."""
    run = {**RUN, "deployment": {**MODEL, "image": DOCKER_IMAGE}}
    script = render("slurm", run)
    start = script.index("PULLED_IMAGES=")
    block = script[start:script.index("\ndone\n", start) + 6]
    image = tmp_path / "images" / (Path(PULLED).name + ".sif")
    image.parent.mkdir()
    body = ('log() { :; }\njob_failure() { echo "FAILED $*"; }\n' + image_check(script)
            + re.sub(r"^PULLED_IMAGES=.*$", f"PULLED_IMAGES=({image})", block, flags=re.M)
            + "echo servers start\n")
    missing = subprocess.run(["bash", "-c", body], capture_output=True, text=True,
                             env={**os.environ, "RUN_DIR": str(tmp_path)}, check=False)
    assert missing.returncode == 1 and "servers start" not in missing.stdout
    assert f"FAILED image {image} is missing: the run's pull job failed" in missing.stdout
    image.write_bytes(b"image")
    there = subprocess.run(["bash", "-c", body], capture_output=True, text=True,
                           env={**os.environ, "RUN_DIR": str(tmp_path)}, check=False)
    assert there.returncode == 0 and there.stdout == "servers start\n"


@pytest.mark.parametrize("left", ["directory", "empty file"])
def test_a_gpu_job_takes_no_directory_or_empty_file_for_its_image(render: RenderFn,
                                                                  tmp_path: Path,
                                                                  left: str) -> None:
    """A directory left at the pulled image's path (`[ -s dir ]` is true) passed the job's
    check, and the servers then failed obscurely: the check is hpceval.images' rule (a regular
    file, not empty), and its words say what is there."""
    run = {**RUN, "deployment": {**MODEL, "image": DOCKER_IMAGE}}
    script = render("slurm", run)
    check = image_check(script)
    start = script.index("PULLED_IMAGES=")
    block = script[start:script.index("\ndone\n", start) + 6]
    image = tmp_path / "images" / (Path(PULLED).name + ".sif")
    image.parent.mkdir()
    if left == "directory":
        image.mkdir()
        (image / "rootfs").write_bytes(b"x")
    else:
        image.write_bytes(b"")
    body = ('log() { :; }\njob_failure() { echo "FAILED $*"; }\n' + check
            + re.sub(r"^PULLED_IMAGES=.*$", f"PULLED_IMAGES=({image})", block, flags=re.M)
            + "echo servers start\n")
    out = subprocess.run(["bash", "-c", body], capture_output=True, text=True,
                         env={**os.environ, "RUN_DIR": str(tmp_path)}, check=False)
    assert out.returncode == 1 and "servers start" not in out.stdout, out
    what = "a directory, not an image file" if left == "directory" else "empty"
    assert f"FAILED image {image} is {what}: " in out.stdout, out.stdout


@pytest.mark.parametrize(("left", "pulled"), [("directory", False), ("empty file", True)])
def test_the_pull_job_neither_skips_nor_pulls_into_a_directory(
        render_pull: RenderFn, tmp_path: Path, left: str, pulled: bool) -> None:
    """A directory at the image's path made the pull job skip the pull (`[ -s dir ]`), and a
    pull over it would put the file inside it (mv): it is refused, naming it, without pulling.
    An empty file (a pull that died) is pulled over."""
    run = {**RUN, "deployment": {**MODEL, "image": DOCKER_IMAGE}}
    pull_job = render_pull("slurm", run)
    check = image_check(pull_job)
    file = tmp_path / "run" / "images" / (Path(PULLED).name + ".sif")
    file.parent.mkdir(parents=True)
    if left == "directory":
        file.mkdir()
    else:
        file.write_bytes(b"")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "apptainer").write_text('#!/bin/bash\necho "pulled $*"\nprintf image > "$3"\n')
    (fake_bin / "apptainer").chmod(0o755)
    body = ("log() { echo \"$*\"; }\n" + check
            + re.sub(r"^PULL_FILE=.*$", f"PULL_FILE={file}", pull_block(pull_job), flags=re.M)
            + 'echo "failed=${#PULL_FAILED[@]}"\n')
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}",
           "RUN_DIR": str(tmp_path / "run"), "TMPDIR": str(tmp_path)}
    out = subprocess.run(["bash", "-c", body], capture_output=True, text=True, env=env,
                         timeout=60, check=False).stdout
    assert ("pulled pull" in out) is pulled, out
    if pulled:
        assert out.endswith("failed=0\n") and file.read_bytes() == b"image", out
    else:
        assert f"not pulling into {file}: it is a directory, not an image file" in out, out
        assert out.endswith("failed=1\n") and file.is_dir() and list(file.iterdir()) == [], out


def test_a_local_job_pulls_its_own_image(render: RenderFn, render_pull: RenderFn) -> None:
    """No queue to wait in and nothing held for others: a local job pulls for itself."""
    run = {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 1, "image": DOCKER_IMAGE}}
    script = render("local", run, ["execution.container_runtime=apptainer"])
    assert "apptainer pull --force" in script and "PULLED_IMAGES=" not in script
    assert render_pull("local", run, ["execution.container_runtime=apptainer"]) == ""


def test_a_staged_server_image_is_not_pulled(render: RenderFn, tmp_path: Path) -> None:
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    (image_dir / "vllm_vllm-openai_v0.32.0.sif").write_bytes(b"staged image")
    run = {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 2, "image": DOCKER_IMAGE}}
    script = render("slurm", run, [f"execution.image_dir={image_dir}"])
    assert "PULL_FILE=" not in script and "apptainer pull" not in script
    sif = render("slurm", {**RUN, "deployment": {**MODEL, "image": "/sif/vllm.sif"}})
    assert "PULL_FILE=" not in sif
