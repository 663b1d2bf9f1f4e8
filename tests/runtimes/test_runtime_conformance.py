"""What every registered container runtime declares (hpceval/runtimes/), for the templates and
staging to read instead of testing runtimes by name: a new runtime is its module and its
tests, not an edit of a template. Each test runs for every registered runtime, the shipped
ones and any later one."""

from __future__ import annotations

import re

import pytest

from hpceval.config.schema import ExecutionSpec
from hpceval.contract import JOB_FILES
from hpceval.render.quoting import render_template
from hpceval.render.steps import image_pull
from hpceval.resources import templates_dir
from hpceval.runtimes import runtime_for, runtime_names
from hpceval.runtimes.base import Runtime
from hpceval.shell import env_name

IMAGE = "docker://example.org/server:1"
SCRATCH_DECLARATIONS = ("pull_cache_env", "pull_temp_env")


@pytest.mark.parametrize("name", runtime_names())
def test_each_runtime_declares_where_a_pull_keeps_its_cache_and_temporary_files(
        name: str) -> None:
    """A pull's layer cache and temporary files (the unpacked image, many GB) go to a folder
    of the pull's own on the node's scratch, through variables each tool reads: the runtime
    names them, itself or through the runtime it extends (podman: docker's); Runtime has no
    default to inherit by mistake (an apptainer-like runtime would get apptainer's names)."""
    runtime = runtime_for(name)
    for attribute in SCRATCH_DECLARATIONS:
        assert attribute not in vars(Runtime)
        assert any(attribute in vars(cls) for cls in type(runtime).__mro__), (name, attribute)
    cache, temp = runtime.pull_cache_env, runtime.pull_temp_env
    for variable in (*cache, *temp):
        env_name(variable)  # a valid name, written unquoted after `export`
    assert not set(cache) & set(temp)
    if runtime.pulled_in_job(IMAGE):
        assert cache, name  # a pull writes layers somewhere: not the tool's default in $HOME
    else:
        assert not cache and not temp, name  # it pulls no image file: nothing to point


@pytest.mark.parametrize("name", [n for n in runtime_names()
                                  if runtime_for(n).pulled_in_job(IMAGE)])
def test_the_pull_exports_the_runtimes_own_variables_and_no_others(name: str) -> None:
    runtime = runtime_for(name)
    pull = image_pull(ExecutionSpec(container_runtime=name), IMAGE, "/runs/inv/images")
    assert pull is not None
    block = render_template("pull_images.j2", {"pulls": [pull], "files": JOB_FILES})
    exported = re.findall(r'^ *export ([A-Za-z_][A-Za-z0-9_]*)="(\$scratch(?:/layers)?)"$',
                          block, re.M)
    assert exported == [*((v, "$scratch/layers") for v in runtime.pull_cache_env),
                        *((v, "$scratch") for v in runtime.pull_temp_env)], block
    assert len(re.findall(r"^ *export ", block, re.M)) == len(exported), block


def test_the_pull_template_names_no_runtimes_variable() -> None:
    text = (templates_dir() / "pull_images.j2").read_text(encoding="utf-8")
    for name in runtime_names():
        runtime = runtime_for(name)
        for variable in (*runtime.pull_cache_env, *runtime.pull_temp_env):
            assert variable not in text, (name, variable)


# How each runtime keeps the user's home out of a container, or brings it in (None: it mounts
# only what it is given). A new runtime is refused here until its line says which it does.
HOME_FLAGS = {"apptainer": ("--no-home", True), "singularity": ("--no-home", True),
              "pyxis": ("--no-container-mount-home", True), "charliecloud": ("--home", False),
              "docker": None, "podman": None}


@pytest.mark.parametrize("name", [n for n in runtime_names() if runtime_for(n).containers])
def test_a_harness_container_leaves_the_users_home_out(name: str) -> None:
    """hpc-admin-2 D12: a harness's caches are in its task folder and its hub cache and data
    are bound by name, so nothing of it is in $HOME, one quota every job of the user shares
    (apptainer's and singularity's harnesses still bound it)."""
    from hpceval.shell import ShellCode

    assert name in HOME_FLAGS, f"say how runtime {name} treats the user's home"
    words = [str(w) for w in runtime_for(name).harness_runner(
        "/images/h.sif", ShellCode('"$TASK_DIR"'), ["/data:/data:ro"], ["HF_HOME"], gpus=False)]
    flags = HOME_FLAGS[name]
    if flags is None:
        assert not any("$HOME" in w or "~" in w or "--home" in w for w in words), words
    else:
        flag, wanted = flags
        assert (flag in words) is wanted, words
