"""A partition's MaxTime learned from sinfo (issue 21, defect 1): a sweep judge never asks for
more than the partition allows, a model job above it is refused at submit, one sinfo call per
partition. sinfo is a strict fake here (it records its calls and answers only `-h -o "%P %l"
[-p NAME]`); the dev cluster's real sinfo is asked in the last test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_sinfo import fake_sinfo_on_path

from hpceval.backends.slurm.formats import walltime_minutes
from hpceval.backends.slurm.partitions import (
    TimeLimit,
    capped_walltime,
    partition_info,
    partition_max_minutes,
    qos_max_minutes,
    time_limit,
)

FAKE = r'''#!/bin/bash
echo "$*" >> "$(dirname "$0")/calls"
[ "$1 $2 $3" = "-h -o %P %l" ] || { echo "unexpected arguments: $*" >&2; exit 2; }
table='gpu* 12:00:00
long 7-00:00:00
debug 30:00
free infinite'
if [ "${4:-}" = -p ]; then grep "^$5[* ]" <<< "$table"; else echo "$table"; fi
'''


@pytest.fixture
def fake_sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with fake_sinfo_on_path(tmp_path, FAKE, monkeypatch) as calls:
        yield calls


def test_max_time_of_named_and_default_partitions(fake_sinfo: Path) -> None:
    assert partition_max_minutes("gpu") == 720
    assert partition_max_minutes("long") == 7 * 24 * 60
    assert partition_max_minutes("debug") == 30
    assert partition_max_minutes("free") is None
    assert partition_max_minutes(None) == 720  # the default partition (gpu*)


def test_one_sinfo_call_per_partition(fake_sinfo: Path) -> None:
    for _ in range(3):
        partition_max_minutes("gpu")
    assert fake_sinfo.read_text().splitlines() == ["-h -o %P %l -p gpu"]


def test_judge_walltime_is_capped_at_the_partition(fake_sinfo: Path) -> None:
    assert capped_walltime("72:00:00", "gpu") == ("720", TimeLimit(720, "the partition's MaxTime"))
    assert capped_walltime("08:00:00", "gpu") == ("08:00:00", None)
    assert capped_walltime("72:00:00", "free") == ("72:00:00", None)


FAKE_SACCTMGR = r'''#!/bin/bash
echo "$*" >> "$(dirname "$0")/sacctmgr.calls"
[ "$1 $2 $3 $4 $6" = "-n -P show qos format=name,maxwall" ] || { echo "bad: $*" >&2; exit 2; }
case $5 in
  short) echo "short|00:30:00" ;;
  long) echo "long|2-00:00:00" ;;
  open) echo "open|" ;;
esac
'''


@pytest.fixture
def fake_sacctmgr(fake_sinfo: Path) -> Iterator[Path]:
    """A strict fake sacctmgr beside the fake sinfo (same folder, first on PATH)."""
    tool = fake_sinfo.parent / "sacctmgr"
    tool.write_text(FAKE_SACCTMGR)
    tool.chmod(0o755)
    qos_max_minutes.cache_clear()
    yield fake_sinfo.parent / "sacctmgr.calls"
    qos_max_minutes.cache_clear()


def test_a_qos_max_wall_is_a_limit_too(fake_sacctmgr: Path) -> None:
    # hpc-admin-2 D1: sites usually cap walltime by QOS or association, not by partition
    assert qos_max_minutes("short") == 30 and qos_max_minutes("long") == 2 * 24 * 60
    assert qos_max_minutes("open") is None and qos_max_minutes("missing") is None
    assert time_limit("gpu", "short") == TimeLimit(30, "QOS short's MaxWall")
    assert time_limit("debug", "long") == TimeLimit(30, "the partition's MaxTime")
    assert time_limit("free", None) is None and time_limit("free", "open") is None
    assert capped_walltime("72:00:00", "gpu", "short") == \
        ("30", TimeLimit(30, "QOS short's MaxWall"))
    for _ in range(3):
        qos_max_minutes("short")
    assert fake_sacctmgr.read_text().splitlines().count(
        "-n -P show qos short format=name,maxwall") == 1  # one call per QOS and process


def test_a_walltime_above_the_qos_max_wall_is_refused_naming_it(fake_sacctmgr: Path,
                                                               tmp_path: Path) -> None:
    from hpceval.config import load_config
    from hpceval.config.errors import ConfigError

    run = tmp_path / "run.yaml"
    run.write_text("deployment: {type: none}\n"
                   "target: {api_endpoint: {url: 'http://h/v1', model_id: m}}\n"
                   "evaluation: {tasks: [{name: ifeval}]}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(run, ["execution.partition=gpu", "execution.qos=short",
                          "execution.walltime=01:00:00"], profile="slurm")
    assert "more than QOS short's MaxWall (30 minutes)" in str(refused.value)
    assert "execution.walltime to 30 minutes or less" in str(refused.value)
    # doctor says so too, from the same cached answer
    from hpceval.config.schema import ExecutionSpec
    from hpceval.doctor.login import partition_lines
    from hpceval.doctor.report import Status

    (part, qos) = partition_lines(ExecutionSpec(partition="gpu", qos="short",
                                                walltime="01:00:00"))
    assert part.status is Status.OK  # the partition's 12 h is fine; the QOS is not
    assert qos.check == "execution.qos" and qos.status is Status.PROBLEM
    assert "MaxWall 30 minutes" in qos.detail and "walltime=30" in qos.fix


def test_sweep_judge_job_asks_for_no_more_than_the_partition(fake_sinfo: Path) -> None:
    from hpceval.config.build import build_run_spec
    from hpceval.config.judges import judge_spec
    from hpceval.config.schema import RunSpec

    spec: RunSpec = build_run_spec({
        "execution": {"partition": "gpu", "walltime": "12:00:00", "max_walltime": "72:00:00",
                      "output_dir": "/out"},
        "evaluation": {"tasks": [{"name": "t"}]},
        "deployment": {"type": "none"},
        "auxiliary_deployments": {"judge": {"type": "vllm", "image": "/i.sif",
                                            "checkpoint_path": "/m", "served_model_name": "j",
                                            "num_nodes": 1, "scope": "sweep"}}})
    assert judge_spec(spec, "judge", "inv").execution.walltime == "720"


def test_a_model_walltime_above_max_time_is_refused_at_submit(fake_sinfo: Path) -> None:
    from hpceval.config.build import build_run_spec
    from hpceval.config.checks import semantic_issues

    spec = build_run_spec({"execution": {"partition": "debug", "walltime": "01:00:00",
                                         "max_walltime": "02:00:00", "output_dir": "/out"},
                           "deployment": {"type": "none"},
                           "evaluation": {"tasks": [{"name": "t"}]}})
    issues = [i for i in semantic_issues(spec, {}) if i.path == "execution.walltime"]
    assert len(issues) == 1 and "MaxTime (30 minutes)" in issues[0].message
    assert "30 minutes or less" in issues[0].fix
    assert not [i for i in semantic_issues(spec, None) if i.path == "execution.walltime"]


@pytest.mark.skipif(shutil.which("sinfo") is None, reason="no Slurm here")
def test_the_dev_clusters_own_partitions() -> None:
    partition_info.cache_clear()
    assert partition_max_minutes("debug") is None  # the dev cluster's partitions: infinite
    assert partition_max_minutes("no-such-partition") is None
    # its QOS "short" (scripts/slurm/start-cluster.sh), from the accounting database
    qos_max_minutes.cache_clear()
    assert qos_max_minutes("short") == 30 and qos_max_minutes("normal") is None
    assert time_limit("debug", "short") == TimeLimit(30, "QOS short's MaxWall")


def test_walltime_minutes_round_up_as_slurm_does(fake_sinfo: Path) -> None:
    """Slurm counts a started minute as a whole one: 12:00:30 is 721 minutes, over a 12 h
    partition, so a judge asking for it is capped (rounded down it would not be, and sbatch
    would refuse it or it would pend on PartitionTimeLimit)."""
    assert walltime_minutes("12:00:30") == 721
    assert walltime_minutes("0:30") == 1  # MM:SS
    assert walltime_minutes("1-00:00:01") == 24 * 60 + 1
    assert walltime_minutes("12:00:00") == 720
    assert capped_walltime("12:00:30", "gpu") == ("720", TimeLimit(720, "the partition's MaxTime"))
    assert capped_walltime("12:00:00", "gpu") == ("12:00:00", None)


def test_every_unambiguous_prefix_of_comment_sets_the_comment() -> None:
    from hpceval.backends.slurm.formats import sets_comment

    assert [f for f in ("c", "co", "com", "comm", "comment", "comments", "cpus") if
            sets_comment(f)] == ["com", "comm", "comment"]
