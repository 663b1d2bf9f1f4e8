"""`hpceval kill` cancels only the run's own jobs, on the real dev cluster (issue 24, finding 6).

Two held jobs of this user: one whose --comment carries the run's id (as the rendered header
writes it, formats.run_comment) and one without (the user's training job, named by a planted
or copied jobs.json). The Slurm backend's cancel reads owners and comments in one squeue call
(%U, %k) and cancels only the first. Held jobs never start: a few seconds in all.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hpceval.backends.base import JobEntry
from hpceval.backends.slurm.backend import SlurmBackend
from hpceval.backends.slurm.formats import run_comment

if TYPE_CHECKING:
    from conftest import SlurmJobs

pytestmark = pytest.mark.slurm

RUN = "20261202-050000-c0ffee"


def test_kill_cancels_the_runs_job_and_leaves_the_users_other_job(
        slurm_jobs: SlurmJobs, tmp_path: Path) -> None:
    site = '{"OccupiedIdleGPUsJobReaper":{"exemptIdleTimeMins":"60"}}'  # a site's JSON too
    quoted = '"' + run_comment(site, RUN).replace('"', '\\"') + '"'  # as the header quotes it
    ours = slurm_jobs.submit("kill-ours", "sleep 60", "--hold", f"--comment={quoted}")
    theirs = slurm_jobs.submit("kill-training", "sleep 60", "--hold",
                               "--comment=training-run-7")
    try:
        entries = [JobEntry(j, "slurm", "main", (0,), False, time.time()) for j in (ours, theirs)]
        marked: list[str] = []
        report = SlurmBackend(slurm_jobs.client).cancel(
            tmp_path, entries, mark=marked.extend, verify_s=20, sleep=time.sleep, run_id=RUN)
        assert report.cancelled == [ours] and marked == [ours], report
        assert report.foreign == {theirs: "training-run-7"} and report.still_active == []
        queue = slurm_jobs.client.squeue([ours, theirs])
        assert queue[theirs].state == "PENDING", queue  # left alone
        assert ours not in queue or queue[ours].state == "CANCELLED", queue
    finally:
        slurm_jobs.client.cancel([ours, theirs])


@pytest.mark.parametrize("flag", ["comment", "comm", "com"])
def test_a_later_comment_flag_replaces_the_runs_tag_so_config_refuses_it(
        slurm_jobs: SlurmJobs, flag: str) -> None:
    """Why execution.sbatch_extra_flags may not set the comment (formats.sets_comment, refused
    by config validation): the real sbatch takes every prefix of --comment from 'com' on, and
    the last one replaces the header's tag, so kill would find no job of the run."""
    from hpceval.backends.slurm.formats import carries_run, sets_comment

    assert sets_comment(flag)
    job = slurm_jobs.submit(f"kill-tag-{flag}", "true", "--hold",
                            f"--comment={run_comment(None, RUN)}", f"--{flag}=site-note")
    try:
        comment = slurm_jobs.client.squeue([job])[job].comment
        assert comment == "site-note" and not carries_run(comment, RUN)
    finally:
        slurm_jobs.client.cancel([job])
