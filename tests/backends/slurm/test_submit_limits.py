"""A user's limit on queued jobs (issue 38: MaxSubmitJobs). Slurm counts each pending or running
job, each array element one, against the MaxSubmitJobsPerUser of the job's QOS and of its
partition's own QOS and the MaxSubmitJobs of its association; a run is several sbatch calls, so
the one past the limit was refused after the others were queued (a sweep without its
aggregation). hpceval counts the run's jobs and the user's queued ones at submit and refuses
the run first, naming the key and the fix. sacctmgr and squeue are strict fakes here; the dev
cluster's QOS `few` in tests/integration/test_site_policies.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_sinfo import fake_sinfo_on_path
from test_partitions import FAKE, FAKE_SACCTMGR

from hpceval.backends.slurm.submit_limits import submit_issues
from hpceval.backends.views import ExecutionView
from hpceval.config.schema import ExecutionSpec
from hpceval.records import Role

# `squeue -h -r -u alice -o %u|%q|%a|%P`: alice's pending and running jobs, one line per array
# element, from the file `queue` beside it; without `-u alice`, every user's
FAKE_SQUEUE = r'''#!/bin/bash
echo "$*" >> "$(dirname "$0")/squeue.calls"
queue="$(dirname "$0")/queue"
[ -e "$queue" ] || { echo "squeue: error: slurm_load_jobs error: Unable to contact" >&2; exit 1; }
case "$*" in
  "-h -r -u alice -o %u|%q|%a|%P") grep '^alice|' "$queue" || true ;;
  "-h -r -o %u|%q|%a|%P") cat "$queue" ;;
  *) echo "bad: $*" >&2; exit 2 ;;
esac
'''


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fake sinfo, sacctmgr (test_partitions') and squeue, first on PATH, as alice; their
    folder (write the queue into `queue` there)."""
    with fake_sinfo_on_path(tmp_path, FAKE, monkeypatch):
        for name, text in (("sacctmgr", FAKE_SACCTMGR), ("squeue", FAKE_SQUEUE)):
            (tmp_path / name).write_text(text)
            (tmp_path / name).chmod(0o755)
        monkeypatch.setenv("LOGNAME", "alice")
        yield tmp_path


def execution(**keys: str) -> ExecutionView:
    return ExecutionSpec(**keys)


def sweep(models: int) -> list[Role]:
    return [*([Role.MAIN] * models), Role.AGGREGATE]


def test_a_run_past_its_qoss_submit_limit_is_refused_counting_the_queue(tools: Path) -> None:
    (tools / "queue").write_text("alice|few|proj1|gpu\nalice|few|proj1|gpu\n"
                                 "alice|normal|proj1|gpu\n")
    ex = execution(qos="few", account="proj1", partition="gpu")
    (issue,) = submit_issues(ex, sweep(2))
    assert issue.path == "execution.qos"
    text = str(issue)
    assert "this run submits 3 jobs (2 model jobs, 1 aggregation job)" in text, text
    assert "QOS few's MaxSubmitJobsPerUser is 4, and 2 of your jobs in the queue already " \
        "count against it" in text, text  # the normal-QOS job does not count
    assert "submit at most 1 model at once" in text and "squeue --me" in text, text
    assert submit_issues(ex, [Role.MAIN, Role.AGGREGATE]) == []  # 2 more fit


def test_an_associations_submit_limit_and_the_default_qos(tools: Path) -> None:
    (tools / "queue").write_text("")
    # account queue: MaxSubmitJobs 3, default QOS few (4): a job naming no QOS counts there too
    ex = execution(account="queue", partition="gpu")
    (issue,) = submit_issues(ex, [Role.PULL, *sweep(2)])
    assert issue.path == "execution.account"
    text = str(issue)
    assert "the MaxSubmitJobs of alice's association with account queue is 3" in text, text
    assert "4 jobs (2 model jobs, 1 aggregation job, 1 image pull job)" in text, text
    (tools / "queue").write_text("alice|few|queue|gpu\nalice|normal|other|gpu\n")
    assert [i.path for i in submit_issues(ex, sweep(2))] == ["execution.account"]
    assert [i.path for i in submit_issues(ex, sweep(3))] == ["execution.qos",
                                                             "execution.account"]


def test_other_users_jobs_count_against_a_qoss_group_and_account_limits(tools: Path) -> None:
    """QOS team: MaxSubmitJobsPerUser 4, MaxSubmitJobsPerAccount 3, GrpSubmitJobs 5. Other
    users' jobs count against the last two (every user's queue is asked then, once), only
    alice's against the first."""
    (tools / "queue").write_text("bob|team|proj1|gpu\ncarol|team|other|gpu\n"
                                 "carol|team|other|gpu\nbob|normal|proj1|gpu\n")
    ex = execution(qos="team", account="proj1", partition="gpu")
    assert submit_issues(ex, sweep(1)) == []  # 2 jobs: account 1 + 2 = 3, group 3 + 2 = 5
    assert (tools / "squeue.calls").read_text() == "-h -r -o %u|%q|%a|%P\n"
    issues = submit_issues(ex, sweep(2))  # 3 jobs: account 1 + 3 = 4, group 3 + 3 = 6
    assert [i.path for i in issues] == ["execution.qos", "execution.qos"], issues
    account, group = (str(issue) for issue in issues)
    assert "QOS team's MaxSubmitJobsPerAccount (account proj1) is 3, and 1 job in the queue " \
        "already counts against it" in account, account
    assert "QOS team's GrpSubmitJobs (every user's jobs together) is 5, and 3 jobs in the " \
        "queue already count against it" in group, group
    (tools / "queue").write_text("alice|team|proj1|gpu\n" * 4)  # her own: per user too
    assert "MaxSubmitJobsPerUser is 4, and 4 of your jobs" in str(submit_issues(ex, sweep(1))[0])


def test_every_users_jobs_under_an_account_count_against_its_group_limit(tools: Path) -> None:
    """Account lab (GrpSubmitJobs 4) is above team-a (alice's) and team-b, and team-c below
    team-b: every user's jobs under any of them count against it; alice's association with
    team-a has a GrpSubmitJobs of its own (3), which counts her jobs there. Neither shows in
    her association's row (sacctmgr fills in only the Max limits of the accounts above), so
    the tree is read once and walked up; cluster c2's lab does not count on c1."""
    (tools / "queue").write_text("bob|normal|team-b|gpu\ncarol|normal|team-c|gpu\n"
                                 "dave|normal|proj1|gpu\n")
    ex = execution(account="team-a", partition="gpu")
    assert submit_issues(ex, [Role.MAIN, Role.AGGREGATE]) == []  # 2 + 2 = 4
    (issue,) = submit_issues(ex, sweep(2))  # 2 + 3 = 5: lab's; 3 of hers: not hers
    assert issue.path == "execution.account"
    text = str(issue)
    assert "account lab's GrpSubmitJobs (every user's jobs under account lab and the accounts " \
        "below it (team-a, team-b, team-c) together) is 4, and 2 jobs in the queue already " \
        "count against it" in text, text  # dave's proj1 job is not under lab
    assert "use another account" in text and "submit at most 1 model at once" in text, text

    (tools / "queue").write_text("alice|normal|team-a|gpu\nalice|normal|team-a|other\n")
    (issue,) = submit_issues(ex, [Role.MAIN, Role.AGGREGATE])  # 2 + 2 = 4 of hers > 3
    assert "the GrpSubmitJobs of alice's association with account team-a is 3, and 2 of your " \
        "jobs in the queue already count against it" in str(issue), issue
    tree = [call for call in (tools / "sacctmgr.calls").read_text().splitlines()
            if "parentname" in call]
    assert tree == ["-n -P show associations user= format=cluster,account,parentname,user,"
                    "grpsubmit"], tree  # the accounts alone, once per process

    # an account outside lab: none of lab's limits, whatever the queue holds
    (tools / "queue").write_text("bob|normal|team-b|gpu\n" * 10)
    assert submit_issues(execution(account="proj1", partition="gpu"), sweep(3)) == []


def test_a_run_of_more_jobs_than_the_cluster_holds_is_refused_without_asking_the_queue(
        tools: Path) -> None:
    """MaxJobCount: every user's job records, each array element one. sbatch past it does not
    refuse but waits until the submit gives up, after the first arrays were queued; a run of
    more jobs than the cluster can ever hold is refused first, naming how many models fit."""
    (tools / "max-job-count").write_text("5\n")
    ex = execution(qos="short", account="proj1")  # no submit limit: no queue to ask
    assert submit_issues(ex, sweep(4)) == []  # 5 jobs: they fit
    (issue,) = submit_issues(ex, sweep(5))
    assert issue.path == "models"
    text = str(issue)
    assert "this run submits 6 jobs (5 model jobs, 1 aggregation job); the cluster's " \
        "MaxJobCount is 5" in text and "submit at most 4 models at once" in text, text
    assert not (tools / "squeue.calls").exists()


def test_no_limit_asks_no_queue_and_an_unreadable_queue_refuses_nothing(tools: Path) -> None:
    assert submit_issues(execution(qos="short", account="proj1"), sweep(100)) == []
    assert not (tools / "squeue.calls").exists()  # no limit: the queue is not asked
    # no queue file: squeue fails (controller down), so nothing can be counted or refused
    assert submit_issues(execution(qos="few", account="proj1"), sweep(100)) == []
    assert (tools / "squeue.calls").read_text().count("\n") == 1


def test_doctor_shows_the_limits_and_the_queue(tools: Path) -> None:
    from hpceval.doctor.login import submit_limit_line

    (tools / "queue").write_text("alice|few|queue|gpu\n")
    line = submit_limit_line(execution(account="queue", partition="gpu"))
    assert "QOS few's MaxSubmitJobsPerUser 4 (1 of yours in the queue now); the " \
        "MaxSubmitJobs of alice's association with account queue 3 (1 of yours" in (
            line.detail), line
    assert "PrivateData" not in line.detail
    # a site that hides other users' jobs: a limit counting theirs shows a floor, and says so
    from hpceval.backends.slurm.partitions import cluster_config

    (tools / "private-data").write_text("accounts,jobs\n")
    cluster_config.cache_clear()
    team = submit_limit_line(execution(qos="team", account="proj1", partition="gpu")).detail
    assert "hidden from you here, PrivateData=jobs: the counts of limits that include " \
        "theirs are floors" in team, team
    assert "PrivateData" not in submit_limit_line(execution(account="queue",
                                                            partition="gpu")).detail
    none = submit_limit_line(execution(qos="short", account="proj1")).detail
    assert "no limit" in none and "the cluster holds 10000 jobs at once (MaxJobCount" in none
