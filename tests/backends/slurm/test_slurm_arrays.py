"""Sweeps beyond MaxArraySize (issue 38 item 12): as few `sbatch --array` as the cluster's
MaxArraySize allows, read once per process; whatever depends on the sweep waits for every array;
each model runs in exactly one element, and `status` stays one sacct call."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.slurm import SACCT_SAMPLES, FakeSlurm

from hpceval.backends import JobQuery, JobRequest
from hpceval.backends.slurm.arrays import split_sweep
from hpceval.backends.slurm.backend import SlurmBackend
from hpceval.backends.slurm.client import CommandSlurmClient, SlurmError
from hpceval.backends.slurm.records import parse_max_array_size
from hpceval.backends.slurm.states import Phase
from hpceval.errors import HpcevalError
from hpceval.records import Role
from hpceval.runs.submit import submit_jobs

CONFIG = SACCT_SAMPLES / "scontrol-22.05-config.txt"  # `scontrol show config`, dev cluster


def sweep(n: int, **kw: Any) -> JobRequest:
    return JobRequest("sweep.sbatch", tuple(range(n)), sweep=True, **kw)


def test_max_array_size_is_read_from_recorded_scontrol_output() -> None:
    assert parse_max_array_size(CONFIG.read_text()) == 1001


def test_a_2500_model_sweep_is_three_arrays_and_aggregation_waits_for_all(
        tmp_path: Path) -> None:
    fake = FakeSlurm()
    entries = submit_jobs(tmp_path, SlurmBackend(fake), sweep(2500), "aggregate.sbatch",
                          "export.sbatch")
    arrays = [s for s in fake.submits if s["script"].name == "sweep.sbatch"]
    assert [s["extra_args"] for s in arrays] == [["--array=0-1000"], ["--array=0-1000"],
                                                 ["--array=0-497"]]
    # the dispatcher's first argument: the model its element 0 runs
    assert [s["script_args"] for s in arrays] == [[], ["1001"], ["2002"]]
    ids = ":".join(s["id"] for s in arrays)
    after = {s["script"].name: s["dependency"] for s in fake.submits}
    assert after["aggregate.sbatch"] == after["export.sbatch"] == f"afterany:{ids}"
    mains = [e for e in entries if e.role == Role.MAIN]
    assert [(e.offset, len(e.models), e.array) for e in mains] == [
        (0, 1001, True), (1001, 1001, True), (2002, 498, True)]
    assert fake.config_calls == 1


@pytest.mark.parametrize(("n", "limit", "parallel"), [
    (2500, 1001, None), (1001, 1001, 4), (1002, 1001, 4), (10_000, 1001, 50), (7, 1, 3),
    (20, 8, 2), (5, 100, None)])
def test_offsets_map_each_model_exactly_once(tmp_path: Path, n: int, limit: int,
                                             parallel: int | None) -> None:
    fake = FakeSlurm()
    fake.max_array = limit
    entries = SlurmBackend(fake).submit(tmp_path, sweep(n, max_parallel=parallel))
    assert len(entries) == -(-n // limit)  # as few arrays as the limit allows
    seen: list[str] = []
    for entry, sent in zip(entries, fake.submits, strict=True):
        elements = [entry.element(m) for m in entry.models]
        assert all(0 <= i < limit for i in elements)
        assert entry.scheduler_id(entry.models[0]) == f"{entry.id}_0"
        # what the dispatcher computes: its element's index plus its first argument
        offset = int(sent["script_args"][0]) if sent["script_args"] else 0
        seen += [f"model {i + offset}" for i in elements]
    assert sorted(seen) == sorted(f"model {m}" for m in range(n))


def test_a_sweep_that_fits_keeps_its_script_array(tmp_path: Path) -> None:
    fake = FakeSlurm()
    (entry,) = SlurmBackend(fake).submit(tmp_path, sweep(1001, max_parallel=4))
    assert fake.submits[0]["extra_args"] == [] and fake.submits[0]["script_args"] == []
    assert entry.offset == 0 and entry.scheduler_id(1000) == f"{entry.id}_1000"


def test_split_arrays_share_the_parallelism_limit() -> None:
    parts = split_sweep(range(2500), 1001, 10)
    assert [p.throttle for p in parts] == [4, 3, 3]
    assert [p.waits_for for p in parts] == [None, None, None]
    # fewer slots than arrays: one element at a time each, and a third array starts once the
    # first has ended, so at most 2 elements of the sweep run at once
    parts = split_sweep(range(2500), 1001, 2)
    assert [(p.throttle, p.waits_for) for p in parts] == [(1, None), (1, None), (1, 0)]
    assert [p.spec() for p in parts] == ["0-1000%1", "0-1000%1", "0-497%1"]


def test_an_array_waits_for_the_one_k_places_before_it(tmp_path: Path) -> None:
    fake = FakeSlurm()
    judge = "77"
    entries = SlurmBackend(fake).submit(tmp_path, sweep(2500, max_parallel=2,
                                                         started_after=(judge,)))
    deps = [s["dependency"] for s in fake.submits]
    assert deps == ["after:77", "after:77", f"after:77,afterany:{entries[0].id}"]


def test_a_sparse_resume_beyond_the_limit(tmp_path: Path) -> None:
    fake = FakeSlurm()
    request = JobRequest("sweep.sbatch", (3, 4, 5, 1500, 2400), sweep=True,
                         elements=(3, 4, 5, 1500, 2400), max_parallel=2)
    entries = SlurmBackend(fake).submit(tmp_path, request)
    assert [s["extra_args"] for s in fake.submits] == [["--array=0-2%1"], ["--array=0,900%1"]]
    assert [s["script_args"] for s in fake.submits] == [["3"], ["1500"]]
    assert [e.scheduler_id(m) for e in entries for m in e.models] == [
        f"{entries[0].id}_0", f"{entries[0].id}_1", f"{entries[0].id}_2",
        f"{entries[1].id}_0", f"{entries[1].id}_900"]


def test_status_of_a_split_sweep_is_one_sacct_call(tmp_path: Path) -> None:
    fake = FakeSlurm()
    backend = SlurmBackend(fake)
    entries = backend.submit(tmp_path, sweep(2500))
    for e in entries:
        fake.states.update({e.scheduler_id(m): "RUNNING" if m % 2 else "COMPLETED"
                            for m in e.models})
    queries = [JobQuery(e, tmp_path, f"m{m}", m) for e in entries for m in e.models]
    states = backend.states(queries, force=True)
    assert len(fake.sacct_calls) == 1
    assert sorted({i.split("_")[0] for i in fake.sacct_calls[0]}) == sorted(e.id for e in entries)
    assert [s.phase for s in states] == [Phase.RUNNING if m % 2 else Phase.DONE
                                         for m in range(2500)]


class RefusingSecond(FakeSlurm):
    def submit(self, script_path: Path, **kw: Any) -> str:
        if len(self.submits) == 1:
            raise SlurmError(["sbatch"], 1, "sbatch: error: Slurm temporarily unable to accept "
                             "job")
        return super().submit(script_path, **kw)


def test_a_refused_array_cancels_the_arrays_submitted_before_it(tmp_path: Path) -> None:
    fake = RefusingSecond()
    with pytest.raises(SlurmError, match="temporarily unable"):
        SlurmBackend(fake).submit(tmp_path, sweep(2500))
    assert fake.cancels == [[fake.submits[0]["id"]]]


def test_a_cluster_without_arrays_is_refused_with_the_reason(tmp_path: Path) -> None:
    fake = FakeSlurm()
    fake.max_array = 0
    with pytest.raises(HpcevalError, match=r"arrays are disabled.*MaxArraySize=0"):
        SlurmBackend(fake).submit(tmp_path, sweep(3))
    assert fake.submits == []


class Runner:
    """subprocess.run for CommandSlurmClient: scontrol answers with the recorded config (or
    fails), sbatch with a job id; every command line is kept."""

    def __init__(self, config_rc: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.config_rc = config_rc
        self.next_id = 40

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(command)
        if command[0] == "scontrol":
            if self.config_rc:
                return subprocess.CompletedProcess(command, 1, "", "slurm_load_ctl_conf "
                                                   "error: Unable to contact slurm controller")
            return subprocess.CompletedProcess(command, 0, CONFIG.read_text(), "")
        self.next_id += 1
        return subprocess.CompletedProcess(command, 0, f"{self.next_id}\n", "")

    def programs(self) -> list[str]:
        return [c[0] for c in self.calls]


def test_max_array_size_is_read_once_per_process(tmp_path: Path) -> None:
    runner = Runner()
    for _ in range(3):  # as each command makes its own client and backend
        SlurmBackend(CommandSlurmClient(runner=runner)).submit(tmp_path, sweep(1500))
    assert runner.programs().count("scontrol") == 1
    assert runner.calls[0] == ["scontrol", "show", "config"]
    sbatch = [c for c in runner.calls if c[0] == "sbatch"]
    assert sbatch[1] == ["sbatch", "--parsable", "--array=0-498", str(tmp_path / "sweep.sbatch"),
                         "1001"]


def test_an_unreadable_max_array_size_is_slurms_default_said_in_a_debug_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    runner = Runner(config_rc=1)
    caplog.set_level(logging.DEBUG, logger="hpceval.backends.slurm")
    client = CommandSlurmClient(runner=runner)
    assert client.max_array_size() == 1001 and client.max_array_size() == 1001
    assert runner.programs() == ["scontrol"]  # not asked again either
    (line,) = [r for r in caplog.records if "MaxArraySize" in r.getMessage()]
    assert line.levelno == logging.DEBUG and "1001" in line.getMessage()
    assert "Unable to contact" in line.getMessage()
