"""What real sites do to a job's servers (issue 21): usage statistics off (defect 9) and a
job-local cache for vLLM, torch.compile/Triton and XDG users (defect 8), and a private temporary
folder, rendered, then run. Their images: test_server_images.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from render_helpers import SERVER_MODEL, SERVER_RUN, RenderFn
from support import ROOT

MODEL, RUN = SERVER_MODEL, SERVER_RUN


def env_function(script: str, name: str = "server_environment") -> str:
    start = script.index(f"\n{name}() {{")
    return script[start:script.index("\n}", start) + 2]


def run_env_function(script: str, env: dict[str, str], names: list[str]) -> dict[str, str]:
    """Run the rendered environment function in bash, as launch_server does, and read back."""
    body = env_function(script) + "\nserver_environment\n" + "".join(
        f'printf "%s=%s\\n" {n} "${{{n}:-}}"\n' for n in names)
    out = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True,
                         check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


@pytest.mark.parametrize("profile", ["slurm", "local-dev"])
def test_vllm_usage_statistics_are_off(render: RenderFn, profile: str) -> None:
    overrides = ["deployment.runtime=host"] if profile == "local-dev" else []
    script = render(profile, {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 4}},
                    overrides)
    fn = env_function(script)
    prefix = "APPTAINERENV_" if profile == "slurm" else ""
    assert f"export {prefix}VLLM_NO_USAGE_STATS=1" in fn
    assert f"export {prefix}DO_NOT_TRACK=1" in fn


CACHE_NAMES = ["VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "FLASHINFER_WORKSPACE_BASE",
               "CUDA_CACHE_PATH", "TORCHINDUCTOR_CACHE_DIR"]
# the server command the step wrapper runs: prints its caches and the folder's mode and owner
SHOW_CACHES = ["bash", "-c", 'for n in "$@"; do printf "%s=%s\\n" "$n" "${!n}"; done; '
               'stat -c "mode=%a owner=%u" "${XDG_CACHE_HOME%/*}"; mkdir -p "$VLLM_CACHE_ROOT"; '
               'python3 -c "import tempfile; print(\'gettempdir=\' + tempfile.gettempdir())"',
               "show", *CACHE_NAMES, "TMPDIR"]


def test_host_servers_cache_in_a_private_folder_of_their_step(render: RenderFn,
                                                              tmp_path: Path) -> None:
    """shared-cluster-4 N5: not under a fixed name in the node's /tmp (Slurm's TMPDIR), which
    every user shares: a planted vLLM record turned a victim's server into a pooling model."""
    script = render("local-dev", {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 4}},
                    ["deployment.runtime=host"])
    base = {"PATH": os.environ["PATH"], "HOME": "/home/alice", "SERVER_DIR": "/runs/m/server",
            "HPCEVAL_JOB_TOKEN": "t"}
    exported = run_env_function(script, base, [*CACHE_NAMES, "HF_HOME", "HPCEVAL_PRIVATE_CACHE"])
    # the batch shell names no cache folder: the step makes its own on its node
    assert [exported[n] for n in CACHE_NAMES] == [""] * len(CACHE_NAMES), exported
    assert exported["HPCEVAL_PRIVATE_CACHE"] == "1"
    # moving XDG_CACHE_HOME must not move the hub cache that holds the models
    assert exported["HF_HOME"] == "/home/alice/.cache/huggingface"
    kept = run_env_function(script, {**base, "HF_HOME": "/hub"}, ["HF_HOME"])
    assert kept["HF_HOME"] == "/hub"

    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir(mode=0o1777)
    planted = node_tmp / "hpceval-cache"  # another user's folder under the old fixed name
    planted.mkdir(mode=0o777)
    out = run_step(script, node_tmp, SHOW_CACHES)
    assert out.returncode == 0, out.stderr
    got = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line
               and not line.startswith("mode="))
    root = Path(got["XDG_CACHE_HOME"])
    private = root.parent
    assert private.parent == node_tmp and private.name.startswith("hpceval-cache.")
    assert private != planted and root.name == "caches"
    # its temporary files too: Inductor's precompiled headers ignore TORCHINDUCTOR_CACHE_DIR and
    # go to tempfile's /tmp/torchinductor_$USER, which another user may have made first (as
    # alice's demo server met: PermissionError)
    assert got["TMPDIR"] == got["gettempdir"] == f"{private}/tmp"
    assert got["VLLM_CACHE_ROOT"] == f"{root}/vllm"
    assert got["TRITON_CACHE_DIR"] == f"{root}/triton"
    # Inductor's default is /tmp/torchinductor_$USER: a fixed name in the node's shared /tmp
    assert got["TORCHINDUCTOR_CACHE_DIR"] == f"{root}/inductor"
    # FlashInfer's JIT cache and CUDA's ComputeCache default to $HOME, whose quota every job
    # of the user shares (hpc-admin-2 D12)
    assert got["FLASHINFER_WORKSPACE_BASE"] == f"{root}/flashinfer"
    assert got["CUDA_CACHE_PATH"] == f"{root}/nv-compute"
    assert f"mode=700 owner={os.getuid()}" in out.stdout
    assert not private.exists(), "the step removes its folder once its server has ended"
    assert list(planted.iterdir()) == []

    # no writable TMPDIR on the node: the step stops, saying what to set
    failed = run_step(script, tmp_path / "missing", SHOW_CACHES)
    assert failed.returncode == 96
    assert "cannot make a private cache folder" in failed.stderr
    assert "set TMPDIR to a writable node-local folder" in failed.stderr


def run_step(script: str, node_tmp: Path, command: list[str],
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The rendered step wrapper on node 'localhost', as launch_server starts it, with the
    environment the server environment function gives a host server (and `env`)."""
    pin = re.search(r"^PIN_GPUS='(.*?)'$", script, re.S | re.M)
    assert pin, "no PIN_GPUS in the script"
    return subprocess.run(["/bin/bash", "-c", pin.group(1), "pin-gpus", "localhost", "", "0", "0",
                           *command], capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ["PATH"], "TMPDIR": str(node_tmp),
                               "HPCEVAL_PRIVATE_CACHE": "1", **(env or {})})


# a server that finds what earlier ones compiled and compiles one kernel of its own
COMPILING = ["bash", "-c", 'ls "$TORCHINDUCTOR_CACHE_DIR" 2>/dev/null | tr "\\n" " "; echo; '
             'mkdir -p "$TORCHINDUCTOR_CACHE_DIR"; echo k > "$TORCHINDUCTOR_CACHE_DIR/$1"',
             "server"]


def test_a_host_server_starts_from_what_the_model_compiled_before(render: RenderFn,
                                                                  tmp_path: Path) -> None:
    script = render("local-dev", {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 4}},
                    ["deployment.runtime=host"])
    env = run_env_function(script, {"PATH": os.environ["PATH"], "RUN_DIR": "/runs/r",
                                    "HPCEVAL_PYTHON": "/venv/bin/python", "HPCEVAL_JOB_TOKEN": "t"},
                           ["HPCEVAL_COMPILE_CACHE", "HPCEVAL_PYTHON"])
    # per engine and model, in the run's folder unless execution.compile_cache_dir says
    assert re.fullmatch(r"/runs/r/compile-cache/vllm-m-[0-9a-f]{12}", env["HPCEVAL_COMPILE_CACHE"])
    assert env["HPCEVAL_PYTHON"] == "/venv/bin/python"  # the step runs the helper with it
    node_tmp = tmp_path / "tmp"
    node_tmp.mkdir()
    store = tmp_path / "compile-cache" / "vllm-m"
    step_env = {"HPCEVAL_COMPILE_CACHE": str(store), "HPCEVAL_PYTHON": sys.executable,
                "PYTHONPATH": str(ROOT)}
    first = run_step(script, node_tmp, [*COMPILING, "first.so"], step_env)
    assert first.returncode == 0 and first.stdout.strip() == "", first.stderr
    assert "compile cache: nothing published in" in first.stderr
    assert "compile cache: 1 new files" in first.stderr
    second = run_step(script, node_tmp, [*COMPILING, "second.so"], step_env)
    assert second.stdout.split() == ["first.so"], second.stderr  # seeded before it started
    assert "compile cache: 1 files" in second.stderr
    assert sorted(p.name for p in (store / "current" / "inductor").iterdir()) == [
        "first.so", "second.so"]
    assert list(node_tmp.iterdir()) == []  # the private folders went with their servers

    off = render("local-dev", {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 4}},
                 ["deployment.runtime=host", "execution.compile_cache=false"])
    assert "HPCEVAL_COMPILE_CACHE" not in env_function(off)
    site = render("local-dev", {**RUN, "deployment": {**MODEL, "tensor_parallel_size": 4}},
                  ["deployment.runtime=host", "execution.compile_cache_dir=/scratch/a b"])
    assert re.search(r"export HPCEVAL_COMPILE_CACHE='/scratch/a b/vllm-m-[0-9a-f]{12}'\n",
                     env_function(site))


def test_container_servers_keep_their_cache_in_the_server_folder(render: RenderFn) -> None:
    script = render("slurm", RUN)
    assert "HPCEVAL_PRIVATE_CACHE" not in script and "mktemp -d" not in pin_body(script)


def pin_body(script: str) -> str:
    pin = re.search(r"^PIN_GPUS='(.*?)'$", script, re.S | re.M)
    assert pin, "no PIN_GPUS in the script"
    return pin.group(1)


def test_container_servers_get_the_cache_bound_in(render: RenderFn) -> None:
    script = render("slurm", RUN)
    fn = env_function(script)
    assert 'export APPTAINERENV_VLLM_CACHE_ROOT="$SERVER_DIR/hpceval-cache/vllm"' in fn
    assert 'export APPTAINERENV_TRITON_CACHE_DIR="$SERVER_DIR/hpceval-cache/triton"' in fn
    assert 'export APPTAINERENV_XDG_CACHE_HOME="$SERVER_DIR/hpceval-cache"' in fn
    launch = script[script.index("launch_server 0 head"):]
    assert '--bind "$SERVER_DIR/hpceval-cache"' in launch.split("vllm serve", 1)[0]
    # the bind's source exists before any container starts
    assert script.index('mkdir -p "$SERVER_DIR/hpceval-cache"') < script.index(
        "launch_server 0 head")


def test_pyxis_servers_mount_the_cache(render: RenderFn) -> None:
    script = render("slurm", RUN, ["execution.container_runtime=pyxis"])
    srun = script[script.index("SERVER_SRUN=("):]
    srun = srun[:srun.index(")\n")]
    assert '"$SERVER_DIR/hpceval-cache":"$SERVER_DIR/hpceval-cache"' in srun


def server_launches(script: str) -> list[list[str]]:
    """The lines of every launch_server call's command, as rendered (a word, or an option and
    its value, a line; still quoted)."""
    calls = re.findall(r"^launch_server .*\n((?:  .*\n)+)", script, re.M)
    return [[line.strip().removesuffix(" \\").strip() for line in call.splitlines()]
            for call in calls]


def container_prefix(words: list[str]) -> list[str]:
    return words[:next(i for i, w in enumerate(words) if w.endswith((".sif", ".sif\"")))]


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_container_servers_leave_the_home_folder_out(render: RenderFn, runtime: str) -> None:
    """hpc-admin-2 D12: apptainer binds $HOME unless told not to (--no-home), and the servers
    then shared the quota'd home of every job of the user. Nothing of a server's is there: its
    caches are in the job's folder, bound in, and the model comes from a bound path. Every
    server step, Ray's nodes too."""
    ray = {**RUN, "deployment": {**MODEL, "pipeline_parallel_size": 2,
                                 "multi_node_backend": "ray"}}
    script = render("slurm", ray, [f"execution.container_runtime={runtime}",
                                   "execution.nodes=2"])
    launches = server_launches(script)
    assert len(launches) == 3, launches  # ray-head, ray-worker-1, head
    for words in launches:
        prefix = container_prefix(words)
        assert prefix[0] == f"{runtime} exec" and "--no-home" in prefix, prefix
    # the premise: every cache folder the server environment names is under a bound folder
    binds = [line.removeprefix("--bind ").strip('"').split(":")[0] for line in prefix
             if line.startswith("--bind ")]
    env = env_function(script)
    env_prefix = f"{runtime.upper()}ENV_"
    for name in CACHE_NAMES:
        value = re.search(rf"^ *export {env_prefix}{name}=(.*)$", env, re.M)
        assert value, (name, env)
        assert any(value.group(1).strip('"').startswith(b) for b in binds), (name, binds)


HUB_MODEL = {**MODEL, "checkpoint_path": None, "hf_model_handle": "org/m"}


def test_a_hub_model_keeps_home_unless_the_hub_cache_is_bound_in(render: RenderFn) -> None:
    """A model named on the hub loads from HF_HOME, by default under $HOME: home stays bound
    then, unless execution.hf_cache_dir names the hub cache (bound in)."""
    run = {**RUN, "deployment": HUB_MODEL}
    (kept,) = server_launches(render("slurm", run))
    assert "--no-home" not in container_prefix(kept)
    (left,) = server_launches(render("slurm", run, ["execution.hf_cache_dir=/shared/hf"]))
    prefix = container_prefix(left)
    assert "--no-home" in prefix and "--bind /shared/hf:/shared/hf" in prefix


@pytest.mark.parametrize("runtime", ["apptainer", "singularity", "pyxis"])
def test_flashinfer_and_cuda_caches_are_the_servers_for_every_runtime(render: RenderFn,
                                                                      runtime: str) -> None:
    """FlashInfer's JIT cache and CUDA's ComputeCache default to $HOME (hpc-admin-2 D12):
    every container runtime points them into the server's cache folder (host servers:
    test_host_servers_cache_in_a_private_folder_of_their_step)."""
    env = env_function(render("slurm", RUN, [f"execution.container_runtime={runtime}"]))
    prefix = {"apptainer": "APPTAINERENV_", "singularity": "SINGULARITYENV_", "pyxis": ""}
    for name, sub in (("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
                      ("CUDA_CACHE_PATH", "nv-compute")):
        assert f'export {prefix[runtime]}{name}="$SERVER_DIR/hpceval-cache/{sub}"' in env, env
