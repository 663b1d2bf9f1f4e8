"""container_runtime docker / podman (NEL's local executor's way): the rendered lines carry
the same binds, the environment by NAME (-e), the GPU flags and the site's run options from
the profile; the script stays valid bash (and shellcheck-clean)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from render_helpers import RenderFn, bash_syntax, shellcheck

from hpceval.runtimes import runtime_for

MODEL = {"checkpoint_path": "/models/m", "served_model_name": "m"}


def _run(runtime: str, **execution: Any) -> dict[str, Any]:
    return {"execution": {"container_runtime": runtime, "gpus_per_node": 2,
                          "hf_cache_dir": "/shared/hf", "extra_binds": ["/data/extra"],
                          **execution},
            "deployment": {"type": "vllm", **MODEL, "image": "docker://vllm/vllm-openai:v0.13.0",
                           "env_vars": {"HF_TOKEN": "host:HF_TOKEN_X"}},
            "evaluation": {"tasks": [{"name": "boxed_chat", "container": "localhost/harness:1",
                                      "env_vars": {"NOTE": "lit:two words"}},
                                     {"name": "completion_probe",
                                      "container": "localhost/harness:1"}]}}


def _block(script: str, start: str, end: str) -> str:
    return script.split(start, 1)[1].split(end, 1)[0]


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_server_and_harness_lines(render: RenderFn, tmp_path: Path, runtime: str) -> None:
    options = ["--runtime", "runc", "--ulimit", "host"]
    script = render("local", _run(runtime, container_options=options))
    server = _block(script, f"  {runtime} run", "vllm serve /models/m")
    words = [w for w in server.split() if w != "\\"]
    assert words[:3] == ["--rm", "--network=host", "--runtime"]
    assert " ".join(words[3:6]) == "runc --ulimit host"
    assert "--gpus all" in " ".join(words)  # the default GPU flags: docker's NVIDIA runtime
    for bind in ("/models/m:/models/m:ro", "/shared/hf:/shared/hf", "/data/extra:/data/extra"):
        assert f"-v {bind}" in " ".join(words), bind
    for name in ("HF_TOKEN", "VLLM_API_KEY", "CUDA_VISIBLE_DEVICES", "VLLM_HOST_IP"):
        assert f"-e {name}" in " ".join(words), name  # by name: no value on the command line
    assert "vllm/vllm-openai:v0.13.0" in server and "docker://" not in server
    harness = script.split("harness_1 task_environment_1", 1)[1].split("\n\n", 1)[0]
    task_dir = '"$MODEL_DIR/tasks/boxed.boxed_chat"'
    assert f"-v {task_dir}:{task_dir}" in harness and f"-w {task_dir}" in harness
    assert "-e NOTE" in harness and "-e HPCEVAL_ENDPOINT_URL" in harness
    assert "--gpus" not in harness  # the task needs no GPU
    assert harness.rstrip().removesuffix("}").rstrip().endswith("localhost/harness:1")
    assert "APPTAINERENV_" not in _block(script, "task_environment_1()", "\n}")
    path = tmp_path / "job.sh"
    path.write_text(script)
    bash_syntax(path)
    shellcheck([path])


def test_cdi_gpu_flags_from_the_profile(render: RenderFn) -> None:
    script = render("local", _run("podman",
                                  container_gpu_flags=["--device", "nvidia.com/gpu=all"]))
    server = _block(script, "  podman run", "vllm serve /models/m")
    assert "--device nvidia.com/gpu=all" in server and "--gpus" not in server


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_server_containers_share_the_hosts_ipc_namespace(render: RenderFn, runtime: str) -> None:
    # hpc-admin-2 N9: a container's /dev/shm is 64 MB, too small for the shared memory of
    # tensor parallelism (vLLM's docs: --ipc=host or --shm-size); harnesses need none
    run = _run(runtime)
    run["deployment"]["tensor_parallel_size"] = 2
    script = render("local", run)
    server = _block(script, f"  {runtime} run", "vllm serve /models/m")
    assert "--ipc=host" in server.split()
    harness = script.split("harness_1 task_environment_1", 1)[1].split("\n\n", 1)[0]
    assert "--ipc=host" not in harness


def test_images_come_from_the_runtimes_store_not_the_image_dir(render: RenderFn) -> None:
    assert not runtime_for("podman").staged_files and runtime_for("apptainer").staged_files
    run = _run("podman", image_dir="/images")
    del run["evaluation"]["tasks"][0]["container"]
    run["evaluation"]["tasks"][0]["name"] = "boxed_chat"
    script = render("local", run)
    assert "/images/" not in script


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_docker_and_podman_are_refused_for_slurm_jobs(tmp_path: Path, runtime: str) -> None:
    # hpc-admin-2 N8: their containers are started by a daemon (or conmon) outside the job's
    # cgroup: no device constraint, no accounting, not stopped by scancel, and --gpus all may
    # pick another job's GPUs
    from render_helpers import resolve

    from hpceval.config.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        resolve("slurm", _run(runtime), tmp_path)
    text = str(refused.value)
    assert "execution.container_runtime" in text and runtime in text
    assert "cgroup" in text and "scancel" in text
    assert "apptainer" in text and "pyxis" in text  # the fix names what a Slurm job can use
    local = resolve("local", _run(runtime), tmp_path)  # a workstation run keeps them
    assert local.spec.execution.container_runtime == runtime
