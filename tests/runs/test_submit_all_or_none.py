"""A run is several submissions (pull, judge, arrays, aggregation, export). When the scheduler
refuses one after queueing others (sbatch's limit on a user's jobs, a partition that went away,
a controller that stopped answering), those queued before are cancelled and marked so, and the
error names them: no sweep runs without its aggregation, no judge serves no array. With the
fake Slurm; the limit that sbatch refused this way is checked before any submission
(tests/backends/slurm/test_submit_limits.py)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from support.runs import configs
from support.slurm import FakeSlurm

from hpceval.backends.slurm.client import SlurmError
from hpceval.runs.index import find_run
from hpceval.runs.jobs import read_jobs
from hpceval.runs.submit import SubmitWithdrawn, submit_configs


class RefusingAggregation(FakeSlurm):
    def submit(self, script_path: Path, **kw: Any) -> str:
        if Path(script_path).name == "aggregate.sbatch":
            raise SlurmError(["sbatch"], 1, "sbatch: error: QOSMaxSubmitJobPerUserLimit")
        return super().submit(script_path, **kw)


class RefusingFirst(FakeSlurm):
    def submit(self, script_path: Path, **kw: Any) -> str:
        raise SlurmError(["sbatch"], 1, "sbatch: error: Invalid partition name specified")


def test_a_refused_aggregation_cancels_the_array_queued_before_it(tmp_path: Path) -> None:
    fake = RefusingAggregation()
    with pytest.raises(SubmitWithdrawn) as refused:
        submit_configs(configs(tmp_path, 3), fake)
    (array,) = (s["id"] for s in fake.submits)
    assert fake.cancels == [[array]]
    text = str(refused.value)
    assert "QOSMaxSubmitJobPerUserLimit" in text and f"were cancelled ({array})" in text, text
    (jobs_file,) = tmp_path.rglob("jobs.json")
    run_dir = jobs_file.parent
    (entry,) = read_jobs(run_dir).chain
    assert entry.id == array and entry.cancelled_at is not None  # status reads "cancelled"


def test_nothing_queued_is_nothing_to_cancel(tmp_path: Path) -> None:
    fake = RefusingFirst()
    with pytest.raises(SlurmError, match="Invalid partition"):
        submit_configs(configs(tmp_path, 2), fake)
    assert fake.submits == [] and not any(fake.cancels)


def test_resume_withdraws_only_what_it_queued(tmp_path: Path) -> None:
    fake = FakeSlurm()
    first = submit_configs(configs(tmp_path, 2), fake)
    array, aggregation = (s["id"] for s in fake.submits)
    fake.states.update({f"{array}_0": "TIMEOUT", f"{array}_1": "COMPLETED",
                        aggregation: "COMPLETED"})
    refusing = RefusingAggregation()
    refusing._ids = itertools.count(2000)  # one scheduler: ids do not repeat
    refusing.states.update(fake.states)
    from hpceval.runs.control import resume_run

    with pytest.raises(SubmitWithdrawn):
        resume_run(find_run(first.invocation_id), refusing)
    (again,) = (s["id"] for s in refusing.submits)
    assert refusing.cancels == [[again]]
    cancelled = [e.id for e in read_jobs(first.run_dir).chain if e.cancelled_at is not None]
    assert cancelled == [again]
