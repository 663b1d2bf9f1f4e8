"""The #SBATCH header: what sbatch parses itself, validated and written its way."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from render_helpers import RenderFn

from hpceval.backends.slurm.header import sbatch_value
from hpceval.config import ConfigError

RUN = {"deployment": {"type": "vllm", "checkpoint_path": "/m", "served_model_name": "m"},
       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}


def header(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_gpu_request_forms(render: RenderFn) -> None:
    per_node = header(render("slurm", RUN, ["execution.gpu_type=h100"]))
    assert "#SBATCH --gpus-per-node=h100:8" in per_node
    gres = header(render("offline-modules", RUN, ["deployment.tensor_parallel_size=4"]))
    assert "#SBATCH --gres=gpu:a100:4" in gres
    none = header(render("local", RUN, ["deployment.runtime=host"]))
    assert not [line for line in none if "gpu" in line]


def test_site_keys_and_extra_flags(render: RenderFn) -> None:
    lines = header(render("qos-reservation", RUN, [
        "execution.reservation=eval-week", "execution.constraint=h100&ib",
        "execution.sbatch_extra_flags.requeue=true", "execution.sbatch_extra_flags.begin=now+1hour",
        "execution.sbatch_extra_flags.hint=false"]))
    text = "\n".join(lines)
    for want in ("--qos=high", "--reservation=eval-week", '--constraint="h100&ib"',
                 "--exclusive", "--mail-type=FAIL", "--requeue", "--begin=now+1hour",
                 "--cpus-per-task=96", "--mem=0", "--signal=B:USR1@300", "--time=04:00:00"):
        assert want in text, want
    assert "--no-requeue" not in text  # the site asked for requeue itself
    assert "--hint" not in text
    # The reaper-exemption JSON keeps its quotes (sbatch strips bare double quotes), with the
    # run's id as one more key of it (hpceval kill cancels only jobs that carry it).
    assert ('--comment="{\\"OccupiedIdleGPUsJobReaper\\":{\\"exemptIdleTimeMins\\":\\"60\\"},'
            '\\"hpceval\\":\\"inv-0123456789abcdef\\"}"' in text)


def test_array_variant(render: RenderFn) -> None:
    from hpceval.render import ArraySpec

    lines = header(render("local-dev", RUN, ["deployment.runtime=host"], array=ArraySpec(5)))
    assert any(line.startswith("#SBATCH --array=0-4%2 ") for line in lines)  # parallelism 2
    assert any(line.startswith("#SBATCH --output=") and "slurm-%A_%a.log" in line
               for line in lines)


@pytest.mark.parametrize("key", ["job_name", "sbatch_comment", "partition", "account"])
@pytest.mark.parametrize("bad", ["two\nlines", "cr\r", "bell\x07"])
def test_control_characters_are_refused_with_the_key(render: RenderFn, key: str,
                                                     bad: str) -> None:
    run = {**RUN, "execution": {key: bad}}
    with pytest.raises(ConfigError) as info:
        render("slurm", run)
    assert f"execution.{key}" in str(info.value)


def test_literal_percent_in_the_run_directory(render: RenderFn) -> None:
    text = render("slurm", RUN, run_dir="/runs/100%done")
    assert "#SBATCH --output=/runs/100%%done/models/demo-model/slurm-%j.log" in text


def test_plain_values_stay_unquoted() -> None:
    assert sbatch_value("gpu:a100:4", "k") == "gpu:a100:4"
    assert sbatch_value("a b", "k") == '"a b"'
    assert sbatch_value('x"y\\z', "k") == '"x\\"y\\\\z"'
    assert sbatch_value(True, "k") == "true"


HOSTILE_HEADER = ["it's # not a comment", 'say "hi"', "back\\slash", "tab\there", "$(id) `x` ;",
                  '{"a": "b"}', "unicode \u00e9\u4e2d", "--leading-dashes", "trailing\\"]


@pytest.mark.slurm
def test_sbatch_reads_header_values_back_unchanged(slurm_cluster: object,
                                                   tmp_path: Path) -> None:
    # The real parser: submit held jobs and read the comment back from the controller.
    for value in HOSTILE_HEADER:
        script = tmp_path / "held.sbatch"
        script.write_text(f"#!/bin/bash\n#SBATCH --comment={sbatch_value(value, 'c')}\n"
                          f"#SBATCH --job-name={sbatch_value(value, 'n')}\n"
                          f"#SBATCH --hold\n#SBATCH --output=/dev/null\ntrue\n")
        job = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True,
                             text=True, check=True).stdout.strip().split(";")[0]
        try:
            fields = {}
            for _ in range(20):
                out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%k\x1f%j"],
                                     capture_output=True, text=True, check=False).stdout
                if out.strip():
                    comment, name = out.rstrip("\n").split("\x1f")
                    fields = {"comment": comment, "name": name}
                    break
                time.sleep(0.2)
        finally:
            subprocess.run(["scancel", job], check=False)
        assert fields == {"comment": value, "name": value}, value
