"""container_runtime charliecloud: the rendered ch-run lines carry the binds, the working
directory, and the environment by NAME (keep-list, the image's ENV, then the step's values from
their prefixed copies), never a value; the script stays valid bash (and shellcheck-clean).
tests/runtimes/test_charliecloud_run.py runs such a line through ch-run for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from render_helpers import RenderFn, bash_syntax, shellcheck

from hpceval.runtimes import runtime_for
from hpceval.runtimes.charliecloud import PREFIX
from hpceval.shell import ShellCode, argv

MODEL = {"checkpoint_path": "/models/m", "served_model_name": "m"}
IMAGE = "/images/vllm.sqfs"


def _run(**execution: Any) -> dict[str, Any]:
    return {"execution": {"container_runtime": "charliecloud", "gpus_per_node": 2,
                          "hf_cache_dir": "/shared/hf", "extra_binds": ["/data/extra"],
                          **execution},
            "deployment": {"type": "vllm", **MODEL, "image": IMAGE,
                           "env_vars": {"HF_TOKEN": "host:HF_TOKEN_X"}},
            "evaluation": {"tasks": [{"name": "boxed_chat", "container": "/images/h.sqfs",
                                      "env_vars": {"NOTE": "lit:two words"}},
                                     {"name": "completion_probe",
                                      "container": "/images/h.sqfs"}]}}


def _words(text: str) -> list[str]:
    return [w for w in text.split() if w != "\\"]


def test_server_line(render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", _run())
    server = script[script.index("  env USER="):script.index("vllm serve /models/m")]
    # ch-run needs $USER: the job's user where the submitter's environment had none
    assert server.startswith('  env USER="${USER:-$(id -un)}" ch-run ')
    words = _words(server)[3:]
    assert words[0] == "ch-run" and words[-2:] == [IMAGE, "--"]
    keep = words[1]
    assert keep.startswith("'--unset-env=!(") and keep.endswith(")'")
    kept = keep[len("'--unset-env=!("):-2].split("|")
    for name in ("HF_TOKEN", "VLLM_API_KEY"):
        assert PREFIX + name in kept, name
        assert f"--set-env={name}=\\${PREFIX}{name}" in words, name  # expanded by ch-run
    assert {"CUDA_VISIBLE_DEVICES", "VLLM_HOST_IP"} <= set(kept)  # set by the job, by name
    assert words[2] == "--set-env"  # the image's ENV: after the keep-list, before the step's
    assert words.index("--set-env") < min(i for i, w in enumerate(words)
                                          if w.startswith("--set-env="))
    assert f"'--unset-env={PREFIX}*'" in words
    line = " ".join(words)
    for bind in ("/models/m:/models/m", "/shared/hf:/shared/hf", "/data/extra:/data/extra"):
        assert f"-b {bind}" in line, bind
    assert "--home" not in words  # a checkpoint from a path: nothing in $HOME is read
    assert "--nv" not in line and "--gpus" not in line  # GPUs: ch-fromhost, at staging
    # the server's variables are exported under the prefix, with their values, in the script
    assert f"export {PREFIX}HF_TOKEN=" in script


def test_harness_line_and_a_valid_script(render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", _run())
    harness = script.split("harness_1 task_environment_1", 1)[1].split("\n\n", 1)[0]
    words = _words(harness)
    task_dir = '"$MODEL_DIR/tasks/boxed.boxed_chat"'
    line = " ".join(words)
    assert f"-b {task_dir}:{task_dir}" in line and f"-c {task_dir}" in line
    assert words[-3:] == ["/images/h.sqfs", "--", "}"]  # start_step_1 ends
    for name in ("NOTE", "HPCEVAL_ENDPOINT_URL", "HPCEVAL_TASK_DIR", "HF_HOME"):
        assert f"--set-env={name}=\\${PREFIX}{name}" in words, name
    assert "two words" not in harness  # the value is in the environment function only
    env_fn = script.split("task_environment_1()", 1)[1].split("\n}", 1)[0]
    assert f"export {PREFIX}NOTE='two words'" in env_fn
    path = tmp_path / "job.sh"
    path.write_text(script)
    bash_syntax(path)
    shellcheck([path])


def test_a_hub_model_without_a_cache_mounts_home() -> None:
    runtime = runtime_for("charliecloud")
    prefix = runtime.server_prefix(IMAGE, [], gpus=True, env_names=[], home=True)
    assert "--home" in prefix and prefix[-2:] == [IMAGE, "--"]


def test_site_options_follow_ch_run_and_binds_keep_src_dst() -> None:
    runtime = runtime_for("charliecloud")
    from hpceval.runtimes.base import SiteOptions

    words = runtime.harness_runner(IMAGE, ShellCode('"$T"'), ["/a", "/b:/c:ro"], ["X"],
                                   gpus=False, site=SiteOptions(("--write-fake",)))
    assert words[2:4] == ["ch-run", "--write-fake"]
    text = argv(words)
    assert "-b /a:/a" in text and "-b /b:/c " in text  # ch-run has no :ro
    # the site's folders before the task's own, which may lie below one of them (/scratch):
    # ch-run 0.31 mounts only onto a folder the image or an earlier bind has
    assert text.index("-b /b:/c ") < text.index('-b "$T":"$T"'), text


def test_pull_is_ch_image_then_ch_convert() -> None:
    runtime = runtime_for("charliecloud")
    assert runtime.tool == "ch-image" and runtime.image_file("x_y_1.sif") == "x_y_1.sqfs"
    words = runtime.pull_argv("/usr/bin/ch-image", Path("/i/.x.sqfs.tmp"), "docker://a/b:1")
    assert words[:2] == ["sh", "-c"] and words[3:] == ["ch-pull", "/usr/bin/ch-image", "a/b:1",
                                                       "/i/.x.sqfs.tmp"]


MOUNT_BASE = ["execution.output_dir=/scratch/me/runs", "evaluation.tasks=[ifeval]",
              "deployment.type=vllm", "deployment.runtime=host", "deployment.checkpoint_path=/m",
              "deployment.served_model_name=m", "execution.container_runtime=charliecloud"]


@pytest.mark.parametrize(("extra", "noted"), [
    ([], True),
    (["execution.extra_binds=[/scratch]"], False),  # its file system's top folder, bound first
    (["execution.extra_binds=[/scratch/me:/scratch/me:ro]"], False),
    (["execution.extra_binds=[/lustre]"], True),
    (["execution.extra_binds=[/scratch/m]"], True),  # a prefix of the name, not a folder above
    (["execution.container_options=[--write-fake]"], False),  # Charliecloud 0.36: writable
    (["execution.container_runtime=apptainer"], False),  # makes its mount points itself
])
def test_a_run_folder_that_images_must_have_is_noted_at_submit(extra: list[str],
                                                              noted: bool) -> None:
    """ch-run 0.31 binds only onto folders an image has: a run folder on scratch that no
    extra_binds folder covers made every container of the job fail on the node ("can't mkdir:
    ... Read-only file system"), after the queue wait. Submit says so first, with the fix."""
    from hpceval.config import load_config

    notes = [n for n in load_config(None, [*MOUNT_BASE, *extra]).composed.notes
             if "binds only onto folders an image has" in n]
    assert bool(notes) is noted, notes
    if noted:
        assert "/scratch/me/runs" in notes[0] and "/scratch bound first" in notes[0], notes
        assert "execution.container_options: [--write-fake]" in notes[0], notes
