"""A partition's MaxTime learned from sinfo (issue 21, defect 1), a QOS's and an association's
MaxWall learned from sacctmgr (hpc-admin-2 D1): a sweep judge never asks for more than they
allow, a model job above them is refused at submit, one sinfo call per partition, one sacctmgr
call per QOS and per account. sinfo and sacctmgr are strict fakes here (they record their calls
and answer only the arguments hpceval passes); the dev cluster's real ones are asked in a test
marked slurm."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_sinfo import fake_sinfo_on_path

from hpceval.backends.slurm.partitions import (
    TimeLimit,
    associations,
    capped_walltime,
    job_association,
    partition_info,
    partition_max_minutes,
    qos_max_minutes,
    time_limit,
)
from hpceval.durations import walltime_minutes

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


# Association rows as `sacctmgr -n -P show associations user=alice account=A|onlydefaults
# format=cluster,account,partition,maxwall,defaultqos,qos,maxsubmit,grpsubmit` prints them: a
# row's MaxWall (and MaxSubmitJobs) is its own or, where it sets none, its account's (sacctmgr
# fills the parents' limits in by default); its GrpSubmitJobs is its own only.
QOS_FIELDS = "name,maxwall,flags,maxsubmitpu,maxsubmitpa,grpsubmit"
FAKE_SACCTMGR = r'''#!/bin/bash
echo "$*" >> "$(dirname "$0")/sacctmgr.calls"
qos_fields=name,maxwall,flags,maxsubmitpu,maxsubmitpa,grpsubmit
if [ "$1 $2 $3 $4 $6" = "-n -P show qos format=$qos_fields" ]; then
  case $5 in
    short) echo "short|00:30:00|DenyOnLimit" ;;
    long) echo "long|2-00:00:00|" ;;
    open) echo "open||" ;;
    beyond) echo "beyond|3-00:00:00|PartitionTimeLimit,OverPartQOS" ;;
    capped) echo "capped|02:00:00|DenyOnLimit" ;;
    few) echo "few|||4||" ;;
    team) echo "team|||4|3|5" ;;
  esac
  exit 0
fi
# the accounts' tree (accounts.py): lab (GrpSubmitJobs 4) above team-a and team-b (and team-c
# below team-b); cluster c2 has a lab of its own whose limit is not c1's. (alice's association
# with team-a has a GrpSubmitJobs of its own, 3: below, with her associations.) One user row
# as a sacctmgr that did not filter on user= would list it: skipped.
if [ "$*" = "-n -P show associations user= format=cluster,account,parentname,user,grpsubmit" ]
then
  printf '%s\n' 'c1|root|||' 'c1|proj1|root||' 'c1|lab|root||4' 'c1|team-a|lab||' \
    'c1|team-b|lab||' 'c1|team-b||bob|1' 'c1|team-c|team-b||' 'c2|lab|root||1' 'c2|team-a|lab||'
  exit 0
fi
fields=cluster,account,partition,maxwall,defaultqos,qos,maxsubmit,grpsubmit
[ "$1 $2 $3 $4 $5 $7 $#" = "-n -P show associations user=alice format=$fields 7" ] \
  || { echo "bad: $*" >&2; exit 2; }
case $6 in
  account=proj1|onlydefaults) printf '%s\n' 'c1|proj1||04:00:00||long,normal,open,short' \
                                            'c1|proj1|gpu|01:00:00||long,normal,open,short' ;;
  account=proj2) echo "c1|proj2|||short|normal,short" ;;
  account=queue) echo "c1|queue|||few|few,normal|3" ;;
  account=team-a) echo "c1|team-a||||normal||3" ;;
  account=twins) printf 'c1|twins||04:00:00||\nc2|twins||04:00:00||\n' ;;
  account=split) printf 'c1|split||04:00:00||\nc2|split||08:00:00||\n' ;;
  account=down) echo "sacctmgr: error: Sending PersistInit msg: Connection refused" >&2
                exit 1 ;;
esac
'''


@pytest.fixture
def fake_sacctmgr(fake_sinfo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A strict fake sacctmgr beside the fake sinfo (same folder, first on PATH), asked as
    user alice."""
    tool = fake_sinfo.parent / "sacctmgr"
    tool.write_text(FAKE_SACCTMGR)
    tool.chmod(0o755)
    monkeypatch.setenv("LOGNAME", "alice")
    yield fake_sinfo.parent / "sacctmgr.calls"


def endpoint_run(tmp_path: Path) -> Path:
    """A run file against an external endpoint: no server, one task; the limits are the
    profile's and the overrides'."""
    run = tmp_path / "run.yaml"
    run.write_text("deployment: {type: none}\n"
                   "target: {api_endpoint: {url: 'http://h/v1', model_id: m}}\n"
                   "evaluation: {tasks: [{name: ifeval}]}\n")
    return run


def test_a_qos_max_wall_is_a_limit_too(fake_sacctmgr: Path) -> None:
    # hpc-admin-2 D1: sites usually cap walltime by QOS or association, not by partition
    assert qos_max_minutes("short") == 30 and qos_max_minutes("long") == 2 * 24 * 60
    assert qos_max_minutes("open") is None and qos_max_minutes("missing") is None
    assert time_limit("gpu", "short") == TimeLimit(30, "QOS short's MaxWall")
    assert time_limit("debug", "long") == TimeLimit(30, "the partition's MaxTime")
    # (account "other": alice has no association with it, so none of its limits counts)
    assert time_limit("free", None, "other") is None
    assert time_limit("free", "open", "other") is None
    assert capped_walltime("72:00:00", "gpu", "short") == \
        ("30", TimeLimit(30, "QOS short's MaxWall"))
    for _ in range(3):
        qos_max_minutes("short")
    assert fake_sacctmgr.read_text().splitlines().count(  # one call per QOS and process
        f"-n -P show qos short format={QOS_FIELDS}") == 1


def test_a_walltime_above_the_qos_max_wall_is_refused_naming_it(fake_sacctmgr: Path,
                                                               tmp_path: Path) -> None:
    from hpceval.config import load_config
    from hpceval.config.errors import ConfigError

    run = endpoint_run(tmp_path)
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


ALICE = "the MaxWall of alice's association with account"


def test_an_association_max_wall_is_a_limit_too(fake_sacctmgr: Path) -> None:
    """hpc-admin-2 D1: a job above its association's MaxWall pends for ever
    (AssocMaxWallDurationPerJobLimit). Slurm uses the user's association for the job's
    partition, else the one for no partition; sacctmgr shows the account's MaxWall on it where
    it sets none of its own."""
    week = 7 * 24 * 60  # partition long's MaxTime
    assert time_limit("long", None, "proj1") == TimeLimit(240, f"{ALICE} proj1")
    assert time_limit("gpu", None, "proj1") == TimeLimit(60, f"{ALICE} proj1 and partition gpu")
    assert time_limit(None, None, "proj1") == TimeLimit(60, f"{ALICE} proj1 and partition gpu")
    assert time_limit("debug", None, "proj1") == TimeLimit(30, "the partition's MaxTime")
    # no account: the user's default association (what a job without --account gets)
    assert time_limit("long", None, None) == TimeLimit(240, f"{ALICE} proj1")
    assert capped_walltime("72:00:00", "long", None, "proj1") == \
        ("240", TimeLimit(240, f"{ALICE} proj1"))
    # Slurm takes the MaxWall of the job's QOS first: a long QOS is what lets a job past its
    # association's, and a QOS that sets none leaves the association's in force
    assert time_limit("long", "long", "proj1") == TimeLimit(2 * 24 * 60, "QOS long's MaxWall")
    assert time_limit("long", "open", "proj1") == TimeLimit(240, f"{ALICE} proj1")
    # a job that names no QOS gets its association's default QOS, whose MaxWall counts then
    assert time_limit("long", None, "proj2") == TimeLimit(
        30, "QOS short's MaxWall (the default QOS of alice's association with account proj2)")
    assert time_limit("long", "open", "proj2") == TimeLimit(week, "the partition's MaxTime")
    # two clusters of one accounting database: known only where they agree
    assert time_limit("long", None, "twins") == TimeLimit(240, f"{ALICE} twins")
    assert job_association("long", "split") is None
    assert time_limit("long", None, "split") == TimeLimit(week, "the partition's MaxTime")
    # none of alice's: no limit of its own (sbatch refuses the job for its account)
    assert time_limit("long", None, "other") == TimeLimit(week, "the partition's MaxTime")
    for _ in range(3):
        time_limit("gpu", None, "proj1")
        time_limit("long", None, "proj1")
    asked = fake_sacctmgr.read_text().splitlines()
    assert asked.count("-n -P show associations user=alice account=proj1 format=cluster,"
                       "account,partition,maxwall,defaultqos,qos,maxsubmit,grpsubmit") == 1
    assert [line for line in asked if "onlydefaults" in line] == [
        "-n -P show associations user=alice onlydefaults "
        "format=cluster,account,partition,maxwall,defaultqos,qos,maxsubmit,grpsubmit"]


def test_no_accounting_is_no_association_limit_and_never_a_refusal(
        fake_sacctmgr: Path, tmp_path: Path) -> None:
    from hpceval.config.build import build_run_spec
    from hpceval.config.checks import semantic_issues

    assert associations("alice", "down") is None  # sacctmgr failed (no slurmdbd)
    assert time_limit("long", None, "down") == TimeLimit(7 * 24 * 60, "the partition's MaxTime")
    spec = build_run_spec({"execution": {"partition": "long", "account": "down",
                                         "walltime": "2-00:00:00", "max_walltime": "3-00:00:00",
                                         "output_dir": "/out"},
                           "deployment": {"type": "none"},
                           "evaluation": {"tasks": [{"name": "t"}]}})
    assert not [i for i in semantic_issues(spec, {}) if i.path == "execution.walltime"]


def test_a_walltime_above_the_association_max_wall_is_refused_naming_it(
        fake_sacctmgr: Path, tmp_path: Path) -> None:
    from hpceval.config import load_config
    from hpceval.config.errors import ConfigError

    run = endpoint_run(tmp_path)
    with pytest.raises(ConfigError) as refused:
        load_config(run, ["execution.partition=long", "execution.account=proj1",
                          "execution.walltime=05:00:00"], profile="slurm")
    assert f"more than {ALICE} proj1 (240 minutes)" in str(refused.value)
    assert "execution.walltime to 240 minutes or less" in str(refused.value)
    load_config(run, ["execution.partition=long", "execution.account=proj1",  # its QOS: 2 days
                      "execution.qos=long", "execution.walltime=05:00:00"], profile="slurm")


def test_a_sweep_judge_asks_for_no_more_than_its_association(fake_sacctmgr: Path) -> None:
    from hpceval.config.build import build_run_spec
    from hpceval.config.judges import judge_spec

    spec = build_run_spec({
        "execution": {"partition": "gpu", "account": "proj1", "walltime": "01:00:00",
                      "max_walltime": "72:00:00", "output_dir": "/out"},
        "evaluation": {"tasks": [{"name": "t"}]},
        "deployment": {"type": "none"},
        "auxiliary_deployments": {"judge": {"type": "vllm", "image": "/i.sif",
                                            "checkpoint_path": "/m", "served_model_name": "j",
                                            "num_nodes": 1, "scope": "sweep"}}})
    judge = judge_spec(spec, "judge", "inv").execution
    assert (judge.walltime, judge.auto_resume) == ("60", True)  # then successor jobs


def test_doctor_reports_the_association_max_wall(fake_sacctmgr: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from hpceval.config.schema import ExecutionSpec
    from hpceval.doctor.login import association_line
    from hpceval.doctor.report import Status

    def line(**execution: str) -> tuple[Status, str, str]:
        found = association_line(ExecutionSpec(**execution))  # type: ignore[arg-type]
        assert found.check == "execution.account"
        return found.status, found.detail, found.fix

    status, detail, fix = line(partition="long", account="proj1", walltime="05:00:00")
    assert status is Status.PROBLEM and f"{ALICE} proj1 is 240 minutes" in detail
    assert "execution.walltime 05:00:00 is longer" in detail and "walltime=240 or less" in fix
    assert line(partition="gpu", account="proj1", walltime="01:00:00")[:2] == (
        Status.OK, f"{ALICE} proj1 and partition gpu is 60 minutes")
    assert line(partition="long", account="proj1", qos="long", walltime="05:00:00")[:2] == (
        Status.OK, "alice's association with account proj1: MaxWall 240 minutes; QOS long's "
                   "MaxWall counts instead")
    assert line(partition="long", account="proj2", qos="open")[:2] == (
        Status.OK, "alice's association with account proj2: no MaxWall")
    status, detail, _ = line(partition="long", account="other")
    assert status is Status.WARNING and "no single association of alice with account other" \
        in detail
    assert line(partition="long", account="down")[:2] == (
        Status.OK, "association: no MaxWall known (sacctmgr could not be asked: no accounting "
                   "database here)")


@pytest.mark.slurm
def test_the_dev_clusters_own_partitions(slurm_cluster: object) -> None:
    partition_info.cache_clear()
    assert partition_max_minutes("debug") is None  # the dev cluster's partitions: infinite
    assert partition_max_minutes("no-such-partition") is None
    # its QOS "short" (scripts/slurm/start-cluster.sh), from the accounting database
    qos_max_minutes.cache_clear()
    assert qos_max_minutes("short") == 30 and qos_max_minutes("normal") is None
    assert time_limit("debug", "short") == TimeLimit(30, "QOS short's MaxWall")
    # the site's users (account "default") and root (account "root"): no MaxWall set on
    # their associations or above them, no default QOS
    associations.cache_clear()
    assoc = job_association("debug", None)
    if assoc is not None:  # this user has an association there
        assert (assoc.partition, assoc.max_minutes, assoc.default_qos) == ("", None, "")
    assert time_limit("debug", None) is None


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


def test_a_qos_the_association_does_not_grant_is_refused_where_slurm_enforces_grants(
        fake_sacctmgr: Path, tmp_path: Path) -> None:
    # the site in a box enforces grants (AccountingStorageEnforce=...,qos): sbatch refuses a
    # job naming a QOS its association does not grant, "Invalid qos specification"
    from hpceval.backends.slurm.partitions import cluster_config, enforced, ungranted_qos
    from hpceval.config import load_config
    from hpceval.config.errors import ConfigError

    run = endpoint_run(tmp_path)
    wants_long = ["execution.partition=long", "execution.account=proj2", "execution.qos=long",
                  "execution.walltime=00:20:00"]
    # not enforced (the controller's default): Slurm takes the job, so hpceval does too
    assert enforced() == frozenset({"none"})
    load_config(run, wants_long, profile="slurm")
    (fake_sacctmgr.parent / "enforce").write_text("associations,limits,qos\n")
    cluster_config.cache_clear()
    assert enforced() == frozenset({"associations", "limits", "qos"})
    assert ungranted_qos("short", "long", "proj2") is None
    assert ungranted_qos("long", "long", "proj1") is None  # proj1 grants long
    with pytest.raises(ConfigError) as refused:
        load_config(run, wants_long, profile="slurm")
    text = str(refused.value)
    assert "execution.qos" in text and "'long' is not a QOS that alice's association with " \
        "account proj2 may use (it grants normal, short)" in text, text
    assert "set execution.qos to one of normal, short, or to null" in text, text
    # an association whose grants sacctmgr does not show: nothing is refused on its account
    assert ungranted_qos("long", "long", "twins") is None
    cluster_config.cache_clear()


def test_a_partitions_own_qos_and_the_flags_that_lift_limits(fake_sacctmgr: Path) -> None:
    # hpc-admin-2 D1's rest: a partition's own QOS (slurm.conf QOS=) caps every job there
    # before the job's own QOS; a job QOS with OverPartQOS comes first again, and one with
    # PartitionTimeLimit may exceed the partition's MaxTime
    from hpceval.backends.slurm.partitions import partition_qos, qos_flags

    (fake_sacctmgr.parent / "partition-qos").write_text("long capped\n")
    assert partition_qos("long") == "capped" and partition_qos("gpu") is None
    assert qos_flags("beyond") == frozenset({"PartitionTimeLimit", "OverPartQOS"})
    assert qos_flags("missing") == frozenset()
    own = TimeLimit(120, "QOS capped's MaxWall (partition long's own QOS)")
    assert time_limit("long", None, "other") == own
    assert time_limit("long", "long", "other") == own  # the job's 2 days do not lift it
    assert time_limit("long", "short", "other") == own  # nor do its 30 minutes count
    # OverPartQOS: the job's QOS first; PartitionTimeLimit: gpu's 12 hours do not count
    assert time_limit("long", "beyond", "other") == TimeLimit(3 * 24 * 60, "QOS beyond's MaxWall")
    assert time_limit("gpu", "beyond", "other") == TimeLimit(3 * 24 * 60, "QOS beyond's MaxWall")
    assert time_limit("gpu", "long", "other") == TimeLimit(720, "the partition's MaxTime")
    assert capped_walltime("72:00:00", "long", "short") == ("120", own)
    asked = fake_sacctmgr.read_text().splitlines()
    assert asked.count(f"-n -P show qos capped format={QOS_FIELDS}") == 1
