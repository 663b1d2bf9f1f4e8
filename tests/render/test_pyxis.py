"""container_runtime pyxis: srun's container flags, quoted by construction, Slurm jobs only."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from render_helpers import RenderFn

from hpceval.config.errors import ConfigError
from hpceval.images import pyxis_reference
from hpceval.render.quoting import FlagWord, ShellCode, command_lines, joined
from hpceval.runtimes import runtime_for

MODEL = {"type": "vllm", "checkpoint_path": "/models/m", "served_model_name": "m",
         "image": "docker://vllm/vllm-openai:v0.13.0", "tensor_parallel_size": 8}
RUN: dict[str, Any] = {"evaluation": {"tasks": [{"name": "boxed_chat"}]}, "deployment": MODEL}
PYXIS = ["execution.container_runtime=pyxis"]


def words(code: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash makes of a rendered fragment, word by word (NUL-separated)."""
    proc = subprocess.run(["bash", "-c", f"printf '%s\\0' {code}"], capture_output=True,
                          check=True, env=env or {})
    return proc.stdout.decode().split("\0")[:-1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"],
                                               blacklist_characters="\x00\n,:"),
                        min_size=1, max_size=20), min_size=1, max_size=4))
def test_joined_is_one_literal_word(values: list[str]) -> None:
    word = joined(values, ",", "--container-mounts=")
    assert words(word) == ["--container-mounts=" + ",".join(values)]


def test_joined_keeps_variable_references_live_and_breaks_lines() -> None:
    task_dir = ShellCode('"$MODEL_DIR/tasks/a b"')
    mount = joined([task_dir, task_dir], ":")
    assert words(joined([mount, "/x y"], ",", "--container-mounts="),
                 {"MODEL_DIR": "/r"}) == ["--container-mounts=/r/tasks/a b:/r/tasks/a b,/x y"]
    assert isinstance(joined(["i"], ",", "--container-image="), FlagWord)
    assert command_lines(["srun", joined(["i"], ",", "--container-image=")]).count("\\\n") == 1
    with pytest.raises(ValueError, match="fixed separator"):
        joined(["a"], ";")
    with pytest.raises(ValueError, match="fixed separator"):
        joined(["a"], ",", "--x=$(id)=")


@pytest.mark.parametrize(("reference", "pyxis"), [
    ("docker://vllm/vllm-openai:v0.13.0", "vllm/vllm-openai:v0.13.0"),
    ("nvcr.io/nvidia/eval-factory/simple-evals:26.03",
     "nvcr.io#nvidia/eval-factory/simple-evals:26.03"),
    ("docker://localhost:5000/x:1", "localhost:5000#x:1"),
    ("ubuntu", "ubuntu"),
])
def test_pyxis_reference(reference: str, pyxis: str) -> None:
    assert pyxis_reference(reference) == pyxis


def test_staged_file_names_follow_the_runtime() -> None:
    assert runtime_for("pyxis").image_file("simple-evals_26.03.sif") == "simple-evals_26.03.sqsh"
    assert runtime_for("apptainer").image_file("simple-evals_26.03.sif") == "simple-evals_26.03.sif"


def test_servers_and_harnesses_run_through_srun_flags(render: RenderFn,
                                                     render_pull: RenderFn) -> None:
    overrides = [*PYXIS, "execution.extra_binds=['/data/with space:/d:ro']",
                 "target.api_endpoint.api_key_name=MY_KEY"]
    text = render("slurm", RUN, overrides)
    assert "apptainer exec" not in text and "export APPTAINERENV_HF_HOME" not in text
    # the docker:// server image: pulled once for the run, by its pull job (issue 21, defect
    # 4; issue 38, N7), run as a file
    assert "--container-image=/home/alice/hpceval-runs/inv-0123456789abcdef/images/" \
        "vllm_vllm-openai_v0.13.0.sqsh \\" in text
    assert 'enroot import --output "${tmp}" docker://vllm/vllm-openai:v0.13.0' \
        in render_pull("slurm", RUN, overrides)
    assert "enroot import" not in text
    # the mount with a space stays one word, inside the comma-separated list
    assert "'/data/with space':/d:ro" in text
    harness_env = re.findall(r"--container-env=(\S+)", text)[-1].split(",")
    assert {"HPCEVAL_BASE_URL", "HF_HOME", "MY_KEY"} <= set(harness_env)
    assert "--container-workdir=\"$MODEL_DIR/tasks/boxed.boxed_chat\"" in text


def test_every_step_of_an_image_reuses_one_container_per_job(render: RenderFn) -> None:
    # hpc-admin-2 N12: without --container-name pyxis unpacks the same .sqsh for every step,
    # twice on one node with two instances; one name per image and job, never another job's
    text = render("slurm", RUN, PYXIS)
    server = '--container-name="hpceval-${HPCEVAL_JOB_ID}-vllm_vllm-openai_v0_13_0"'
    assert text.count(server) == 1  # launch_server's one srun, for every instance
    names = set(re.findall(r"--container-name=(\S+)", text))
    assert len(names) == 2 and all("${HPCEVAL_JOB_ID}" in name for name in names), names
    image = {name: text[:text.index(name)].rsplit("--container-image=", 1)[1].split()[0]
             for name in names}
    assert len(set(image.values())) == 2  # a name per image, the harness's apart


def test_host_harness_stays_on_the_host(render: RenderFn) -> None:
    run = {**RUN, "deployment": {**MODEL, "runtime": "host"}}
    text = render("slurm", run, [*PYXIS, "evaluation.tasks=[{name: completion_probe}]"])
    assert "--container-image" not in text


def test_pyxis_needs_slurm(render: RenderFn) -> None:
    with pytest.raises(ConfigError, match=r"execution\.container_runtime") as info:
        render("local", RUN, [*PYXIS, "deployment.tensor_parallel_size=1"])
    assert "srun" in str(info.value)
