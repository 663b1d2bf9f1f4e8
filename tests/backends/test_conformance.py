"""One set of tests every execution backend passes: the Slurm backend on the strict fake client
(tests/support/slurm.FakeSlurm) and the local backend on this machine here, the Slurm
backend on the real dev cluster in test_conformance_cluster.py. A new backend joins by adding
a rig: the memory backend of another distribution (tests/plugins/memory_backend) has one where
it is installed, which test_memory_plugin.py arranges in a subprocess (`-k memory`).

Each rig starts a trivial job that would run for a minute; the tests submit it, ask for it
with `query`, cancel it and ask again.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.slurm import FakeSlurm

from hpceval.backends import (
    BACKENDS,
    Backend,
    BackendFiles,
    JobEntry,
    JobInfo,
    JobRequest,
    JobUsage,
    UsageQuery,
)
from hpceval.backends.local import LocalBackend
from hpceval.backends.slurm.backend import SlurmBackend
from hpceval.contract import LOCAL_RC_FILE, LOCAL_RUNNER, LOCAL_RUNNER_LOG, model_dir
from hpceval.errors import HpcevalError
from hpceval.phases import Phase
from hpceval.records import Role
from hpceval.render.quoting import render_template

LIVE = {Phase.QUEUED, Phase.RUNNING}
# the memory plugin is there only in an interpreter that had it on its path from the start
MEMORY = importlib.util.find_spec("hpceval_memory_backend") is not None
FLAGS = ("resubmits_itself", "accounted", "multi_node", "srun_steps", "confines_jobs",
         "schedules_later", "side_by_side", "partitions", "pulls_ahead", "runs_here")


@dataclass
class Rig:
    backend: Backend
    run_dir: Path
    request: JobRequest
    # what the scheduler does by itself once a job is queued: the fake's test sets the state
    started: Callable[[JobEntry], None] = lambda entry: None
    wait_s: float = 0.0  # how long query may take to list a fresh or cancelled job
    fake: FakeSlurm | None = field(default=None)
    # runs a short job to its end the way this backend's jobs run; gives its entry and the
    # usage the backend must report for it (elapsed: at least this many seconds)
    short: Callable[[], tuple[JobEntry, JobUsage]] | None = None


def _fake_slurm(tmp_path: Path) -> Rig:
    fake = FakeSlurm()

    def started(entry: JobEntry) -> None:
        fake.states[entry.id] = "RUNNING"

    (tmp_path / "job.sbatch").write_text("#!/bin/bash\nsleep 60\n")
    backend = SlurmBackend(fake)

    def short() -> tuple[JobEntry, JobUsage]:
        (entry,) = backend.submit(tmp_path, JobRequest("job.sbatch"))
        fake.states[entry.id], fake.usage[entry.id] = "COMPLETED", (8, 4, 1)
        return entry, JobUsage(entry.id, 8, 4, 1, True)

    return Rig(backend, tmp_path, JobRequest("job.sbatch"), started, fake=fake, short=short)


def _local(tmp_path: Path) -> Rig:
    (tmp_path / LOCAL_RUNNER).write_text("sleep 60\n")
    (tmp_path / LOCAL_RUNNER_LOG).parent.mkdir(parents=True)  # a run directory's logs/
    backend = LocalBackend()

    def short() -> tuple[JobEntry, JobUsage]:
        # the real runner (templates/local.sh.j2) over a one-second job script of model "m"
        run_dir = tmp_path / "short"
        model_dir(run_dir, "m").mkdir(parents=True)
        (run_dir / LOCAL_RUNNER_LOG).parent.mkdir(parents=True)
        (run_dir / "job.sbatch").write_text("#!/bin/bash\nsleep 1\n")
        (run_dir / LOCAL_RUNNER).write_text(backend.scripts(BackendFiles(
            run_dir, (("m", "job.sbatch"),), "0:01:00", 10, sys.executable,
            render=render_template, gpus=2))[LOCAL_RUNNER])
        (entry,) = backend.submit(run_dir, JobRequest(LOCAL_RUNNER, (0,), ("m",)))
        deadline = time.monotonic() + 30
        while not (model_dir(run_dir, "m") / LOCAL_RC_FILE).is_file():
            assert time.monotonic() < deadline, "the local runner did not finish"
            time.sleep(0.2)
        return entry, JobUsage(entry.id, 1, 2, 1, True)

    return Rig(backend, tmp_path, JobRequest(LOCAL_RUNNER), short=short)


def _memory(tmp_path: Path) -> Rig:
    from hpceval_memory_backend import MemoryBackend, MemoryCluster

    cluster = MemoryCluster()  # this rig's own scheduler: the test drives its jobs' phases
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\nsleep 60\n")
    backend = MemoryBackend(cluster)

    def started(entry: JobEntry) -> None:
        cluster.set(entry.id, "running")

    def short() -> tuple[JobEntry, JobUsage]:
        run_dir = tmp_path / "short"
        model_dir(run_dir, "m").mkdir(parents=True)
        (run_dir / "job.sbatch").write_text("#!/bin/bash\nsleep 1\n")
        (entry,) = backend.submit(run_dir, JobRequest("job.sbatch", (0,), ("m",)))
        cluster.set(entry.id, "done", gpus=2, nodes=1, elapsed_s=3)
        return entry, JobUsage(entry.id, 3, 2, 1, True)

    return Rig(backend, tmp_path, JobRequest("job.sbatch"), started, short=short)


RIGS = {"slurm-fake": _fake_slurm, "local": _local, **({"memory": _memory} if MEMORY else {})}


@pytest.fixture(params=list(RIGS))
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    return RIGS[request.param](tmp_path)


def _until(rig: Rig, check: Callable[[], JobInfo | bool | None]) -> JobInfo | bool | None:
    deadline = time.monotonic() + rig.wait_s
    while True:
        answer = check()
        if answer or time.monotonic() >= deadline:
            return answer
        time.sleep(0.5)


def test_a_backend_declares_its_name_capabilities_and_words(rig: Rig) -> None:
    backend = rig.backend
    assert backend.name in BACKENDS
    assert all(isinstance(getattr(backend, flag), bool) for flag in FLAGS)
    assert isinstance(backend.own_jobs_command, str) and backend.own_jobs_command


def test_a_backend_writes_its_own_header_as_comments_to_bash(rig: Rig) -> None:
    """The header dialect (Backend.header, cpu_header, log_name, spec_issues, submit_issues):
    plain lines bash reads as comments (none where no scheduler reads them), a log name per
    role."""
    from hpceval.backends import CpuJob
    from hpceval.config.schema import ExecutionSpec

    backend = rig.backend
    ex = ExecutionSpec(type=backend.name)  # type: ignore[arg-type]
    lines = backend.cpu_header(ex, CpuJob("aggregate", "hpceval-x", "/runs/x/logs", 15, "", "",
                                          "inv-1"))
    assert all(isinstance(line, str) and line.startswith("#") for line in lines)
    assert "aggregate" in backend.log_name("aggregate")
    assert backend.spec_issues(ex, ask=False) == []
    # one job of a profile that names no limit: nothing the scheduler would refuse
    assert backend.submit_issues(ex, [Role.MAIN]) == []


def test_submit_query_cancel_query(rig: Rig) -> None:
    backend = rig.backend
    (entry,) = backend.submit(rig.run_dir, rig.request)
    assert (entry.kind, entry.role, entry.reason) == (backend.name, "main", "submit")
    try:
        rig.started(entry)
        live = _until(rig, lambda: backend.query([entry.id], queue=True).get(entry.id))
        assert isinstance(live, JobInfo) and live.status.phase in LIVE, live
        assert live.ended_at is None
        assert backend.describe(entry, 1)
    finally:
        marked: list[str] = []
        report = backend.cancel(rig.run_dir, [entry], mark=marked.extend, verify_s=15.0,
                                sleep=time.sleep)
    assert marked == [entry.id] == report.cancelled  # recorded before any signal
    assert report.still_active == []

    def ended() -> bool:
        info = backend.query([entry.id]).get(entry.id)
        # a scheduler keeps the record (cancelled, with its end); the local backend keeps
        # none: its runner is gone, and the models' status is on disk
        return info is None if not backend.accounted else (
            info is not None and info.status.phase is Phase.CANCELLED
            and (rig.fake is not None or info.ended_at is not None))  # the fake keeps no times

    assert _until(rig, ended)


def test_a_job_the_backend_never_ran_is_not_listed(rig: Rig) -> None:
    unknown = "local-999999999" if rig.backend.name == "local" else "999999"
    assert rig.backend.query([unknown]) == {}
    assert rig.backend.query([]) == {}


def test_resubmit_after_queues_a_dependent_job_where_jobs_resubmit_themselves(
        rig: Rig) -> None:
    if rig.fake is None and rig.backend.resubmits_itself:
        pytest.skip("on the dev cluster the fake's test covers it: no job to wait for here")
    script = rig.run_dir / rig.request.script
    if not rig.backend.resubmits_itself:  # no successors to wait for: refused, named
        with pytest.raises(HpcevalError, match="queues no job after another"):
            rig.backend.resubmit_after(rig.run_dir, script, ["a", "b"], role="export")
        return
    entry = rig.backend.resubmit_after(rig.run_dir, script, ["11", "12"], role="export")
    assert (entry.kind, entry.role, entry.reason, entry.models) == (
        rig.backend.name, "export", "auto-resume", ())
    assert rig.fake is not None
    assert rig.fake.submits[-1]["dependency"] == "afterany:11:12"
    assert rig.fake.submits[-1]["id"] == entry.id


def test_usage_of_an_ended_job_and_of_one_never_run(rig: Rig) -> None:
    """What cost accounting asks (GPUs x elapsed): the backend answers from its own records,
    in order, final once the job ended; None for a job it never ran."""
    assert rig.short is not None
    entry, expected = rig.short()
    query = UsageQuery(entry.id, entry.submitted_at, Path(rig.run_dir / "short"), "m")
    never = UsageQuery("local-999999999" if rig.backend.name == "local" else "999999",
                       time.time(), rig.run_dir, "m")
    found, missing = rig.backend.usage([query, never])
    assert found is not None and (found.job_id, found.gpus, found.nodes, found.final) == (
        expected.job_id, expected.gpus, expected.nodes, expected.final)
    assert expected.elapsed_s <= found.elapsed_s <= expected.elapsed_s + 10
    assert missing is None
    # ask=False: no scheduler call, the same answer from what the last one said
    assert rig.backend.usage([query], ask=False) == [found]
