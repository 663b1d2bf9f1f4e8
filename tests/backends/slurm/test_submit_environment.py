"""The submit shell's SBATCH_* input variables (hpc-admin-2, issue 38: "not read yet:
SBATCH_ACCOUNT/_PARTITION/_QOS"). sbatch lets them override the script's own #SBATCH lines, so
a site module's SBATCH_PARTITION or a user's SBATCH_TIMELIMIT would put the job elsewhere, or
end it sooner, than `hpceval render` shows and the limits were checked for. hpceval leaves out
of sbatch's environment those for the options the job sets itself, and says so; those for
options it leaves unset (an SBATCH_ACCOUNT where execution.account is null) still apply, and
the limits are checked for them. Real on the site in a box:
tests/integration/test_site_policies.py."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_sinfo import fake_sinfo_on_path
from test_partitions import endpoint_run

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.backends.slurm.formats import input_variable, overridden_inputs, script_options

SCRIPT = """#!/bin/bash
#SBATCH --job-name=hpceval-x
#SBATCH --partition=debug

#SBATCH --time=00:40:00
#SBATCH --gpus-per-node=4
set -euo pipefail
#SBATCH --account=never-read
echo hi
"""


def test_the_options_a_script_sets_are_those_sbatch_reads() -> None:
    # sbatch stops at the first command: the --account after it is a comment to it
    assert script_options(SCRIPT) == ["job-name", "partition", "time", "gpus-per-node"]
    assert [input_variable(o) for o in ("partition", "time", "array", "mem", "gpus-per-node",
                                        "mem-per-gpu")] == [
        "SBATCH_PARTITION", "SBATCH_TIMELIMIT", "SBATCH_ARRAY_INX", "SBATCH_MEM_PER_NODE",
        "SBATCH_GPUS_PER_NODE", "SBATCH_MEM_PER_GPU"]
    environ = {"SBATCH_PARTITION": "short", "SBATCH_TIMELIMIT": "5", "SBATCH_ACCOUNT": "p",
               "SBATCH_EXPORT": "NONE", "SBATCH_ARRAY_INX": "0-3"}
    # the command line's --array (a sweep split past MaxArraySize) counts as the job's too
    assert overridden_inputs(SCRIPT, ["--parsable", "--array=0-9"], environ) == [
        "SBATCH_ARRAY_INX", "SBATCH_PARTITION", "SBATCH_TIMELIMIT"]


class EnvRunner:
    def __init__(self) -> None:
        self.envs: list[dict[str, str]] = []

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.envs.append(kwargs["env"])
        return subprocess.CompletedProcess(command, 0, "57\n", "")


def test_sbatch_gets_no_variable_that_would_override_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(SCRIPT)
    for name, value in {"SBATCH_PARTITION": "short", "SBATCH_TIMELIMIT": "5",
                        "SBATCH_ACCOUNT": "proj", "SBATCH_EXPORT": "NONE"}.items():
        monkeypatch.setenv(name, value)
    runner = EnvRunner()
    client = CommandSlurmClient(runner=runner)
    with caplog.at_level(logging.WARNING):
        assert client.submit(script) == "57"
    env = runner.envs[0]
    assert "SBATCH_PARTITION" not in env and "SBATCH_TIMELIMIT" not in env
    # what the job leaves unset still applies: its account, the site's export setting
    assert env["SBATCH_ACCOUNT"] == "proj" and env["SBATCH_EXPORT"] == "NONE"
    assert "not applied from your environment: SBATCH_PARTITION=short, SBATCH_TIMELIMIT=5" in (
        caplog.text)
    client.test_only(script)  # the doctor's --test-only asks about the same job
    assert "SBATCH_PARTITION" not in runner.envs[1] and runner.envs[1]["SBATCH_ACCOUNT"] == "proj"


FAKE_SINFO = r'''#!/bin/bash
[ "$1 $2 $3" = "-h -o %P %l" ] || { echo "unexpected arguments: $*" >&2; exit 2; }
table='gpu* 12:00:00
short 30:00'
if [ "${4:-}" = -p ]; then grep "^$5[* ]" <<< "$table"; else echo "$table"; fi
'''


@pytest.fixture
def fake_sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with fake_sinfo_on_path(tmp_path / "bin", FAKE_SINFO, monkeypatch) as calls:
        yield calls


def test_an_unset_partition_is_checked_as_the_environment_sets_it(
        fake_sinfo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpceval.config import load_config
    from hpceval.config.errors import ConfigError

    run = endpoint_run(tmp_path)
    hour = ["execution.partition=null", "execution.walltime=01:00:00"]
    load_config(run, hour, profile="slurm")  # the default partition (gpu): 12 hours
    monkeypatch.setenv("SBATCH_PARTITION", "short")
    with pytest.raises(ConfigError) as refused:
        load_config(run, hour, profile="slurm")
    assert "more than the partition's MaxTime (30 minutes) (from your environment: " \
        "SBATCH_PARTITION=short)" in str(refused.value)
    # a partition the profile names is the job's: the environment's is left out at submit
    load_config(run, ["execution.partition=gpu", "execution.walltime=01:00:00"],
                profile="slurm")


def test_doctor_names_the_variables_left_out_and_those_that_apply() -> None:
    from hpceval.config.build import build_run_spec
    from hpceval.doctor.login import submit_environment_line
    from hpceval.doctor.report import Status

    spec = build_run_spec({"execution": {"partition": "gpu", "walltime": "01:00:00",
                                         "output_dir": "/scratch/runs"},
                           "deployment": {"type": "none"},
                           "evaluation": {"tasks": [{"name": "t"}]}})
    assert submit_environment_line(spec, {"HOME": "/h"}).status == Status.OK
    line = submit_environment_line(spec, {"SBATCH_PARTITION": "short", "SBATCH_ACCOUNT": "p",
                                          "SBATCH_TIMELIMIT": "5"})
    assert line.status == Status.WARNING
    assert line.detail.startswith("SBATCH_PARTITION=short, SBATCH_TIMELIMIT=5 not applied: "
                                  "the job sets those options itself"), line.detail
    assert "SBATCH_ACCOUNT=p applied (the job leaves those options unset)" in line.detail
    only_unset = submit_environment_line(spec, {"SBATCH_ACCOUNT": "p"})
    assert only_unset.status == Status.OK and "SBATCH_ACCOUNT=p applied" in only_unset.detail
