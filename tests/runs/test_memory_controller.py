"""The controller on a second scheduler: runs with ``execution.type: memory`` (the backend of the
distribution in tests/plugins/memory_backend) are rendered with that backend's own partials,
submitted, followed, killed and resumed, their jobs' phases driven by the test. Ported from the
Slurm-bound tests (tests/runs/test_status.py, test_control.py, tests/integration/
test_controller.py): what they check is the controller's bookkeeping, not Slurm's.

The plugin must be installed before hpceval.config.schema is first imported (execution.type's
choices are read then), so this module runs in the interpreter tests/backends/
test_memory_plugin.py starts with the plugin on its path; elsewhere it is skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support.runs import configs, finish_task, write_run_file

pytest.importorskip("hpceval_memory_backend", reason="runs where the memory plugin is installed "
                    "(tests/backends/test_memory_plugin.py starts that interpreter)")

from hpceval_memory_backend import MemoryBackend, MemoryCluster

from hpceval.backends import BACKENDS, JobEntry
from hpceval.cli.main import cli
from hpceval.phases import Phase
from hpceval.runs.control import ResumeRefused, kill_run, resume_run
from hpceval.runs.index import find_run
from hpceval.runs.jobs import append_jobs, read_jobs
from hpceval.runs.state import Tracker
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"
MEMORY = {"type": "memory"}


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster()


def test_the_plugin_is_a_registered_execution_type_rendered_with_its_own_partials(
        tmp_path: Path) -> None:
    assert "memory" in BACKENDS.names()
    (resolved,) = configs(tmp_path, execution=MEMORY)  # load_config accepts the type
    assert resolved.spec.execution.type == "memory"
    result = CliRunner().invoke(cli, ["render", str(write_run_file(tmp_path, execution=MEMORY)),
                                      "--profile", "local-dev"])
    assert result.exit_code == 0, result.output
    script = result.output
    assert "# execution.type memory: a main job on 1 node(s)" in script  # its header
    assert "export HPCEVAL_CLUSTER=memory" in script  # its env.j2, from the plugin's package
    assert "the in-memory scheduler takes no job back" in script  # its preempted.j2
    assert "starts nothing on other nodes" in script  # its discover.j2
    assert "SLURM" not in script and "srun" not in script


def test_a_refresh_of_50_jobs_is_one_scheduler_call(tmp_path: Path,
                                                    cluster: MemoryCluster) -> None:
    """test_status.py's 40 runs and a sweep of 10, on the memory scheduler."""
    runs = configs(tmp_path, execution=MEMORY)
    tracker = Tracker(cluster)
    for i in range(40):
        result = submit_configs(runs, cluster)
        cluster.set(result.job_ids[0], "running" if i % 2 else "queued")
        tracker.add(result.run_dir)
    sweep = submit_configs(configs(tmp_path / "s", 10, execution=MEMORY), cluster,
                           aggregate=False)
    cluster.set(sweep.job_ids[0], "running")  # every element of the array
    tracker.add(sweep.run_dir)
    states = tracker.refresh(force=True)
    assert len(cluster.asked("states")) == 1 and len(cluster.asked("states")[0]) == 50
    assert {s.phase for s in states} == {Phase.RUNNING, Phase.QUEUED}
    tracker.refresh()  # inside the rate limit: no second call
    assert len(cluster.asked("states")) == 1
    assert tracker.backend("memory").scheduler_calls == 1


def test_done_markers_need_no_scheduler_call(tmp_path: Path, cluster: MemoryCluster) -> None:
    result = submit_configs(configs(tmp_path, execution=MEMORY), cluster)
    for key in (ONE, TWO):
        finish_task(result.run_dir, "solo", key)
    tracker = Tracker(cluster)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    assert state.phase is Phase.DONE and cluster.asked("states") == []


def test_each_phase_the_test_drives_reads_in_status(tmp_path: Path,
                                                    cluster: MemoryCluster) -> None:
    result = submit_configs(configs(tmp_path, 5, execution=MEMORY), cluster, aggregate=False)
    array = result.job_ids[0]
    for element, state in enumerate(("queued", "running", "done", "failed", "timeout")):
        cluster.set(f"{array}_{element}", state)
    finish_task(result.run_dir, "model-02", ONE)
    finish_task(result.run_dir, "model-02", TWO)
    tracker = Tracker(cluster)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    phases = [(m.phase, m.job_id) for m in state.models]
    assert phases == [(Phase.QUEUED, f"{array}_0"), (Phase.RUNNING, f"{array}_1"),
                      (Phase.DONE, f"{array}_2"), (Phase.FAILED, f"{array}_3"),
                      (Phase.FAILED, f"{array}_4")]
    assert "walltime reached" in state.models[4].reason
    assert cluster.asked("states") == [tuple(f"{array}_{i}" for i in (0, 1, 3, 4))]  # 2: done


def test_kill_cancels_every_job_of_the_chain_and_verifies(tmp_path: Path,
                                                          cluster: MemoryCluster) -> None:
    result = submit_configs(configs(tmp_path, 3, execution=MEMORY), cluster)
    array, aggregate = result.job_ids
    cluster.set(f"{array}_0", "running")
    cluster.set(f"{array}_2", "done")
    finish_task(result.run_dir, "model-02", ONE)
    finish_task(result.run_dir, "model-02", TWO)
    report = kill_run(find_run(result.invocation_id), cluster, sleep=lambda _: None)
    assert cluster.cancels == [(array, aggregate)]  # one cancel, the array by its base id
    assert report.cancelled == [array, aggregate] and report.still_active == []
    assert [cluster.state(f"{array}_{i}") for i in range(3)] == [
        "cancelled", "cancelled", "done"]
    assert all(e.cancelled_at for e in read_jobs(result.run_dir).chain)
    tracker = Tracker(cluster)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    assert [m.phase for m in state.models] == [Phase.CANCELLED, Phase.CANCELLED, Phase.DONE]


def test_kill_reports_what_stays_active(tmp_path: Path, cluster: MemoryCluster) -> None:
    result = submit_configs(configs(tmp_path, execution=MEMORY), cluster)
    cluster.set(result.job_ids[0], "running", sticky=True)  # a job the scheduler cannot stop
    slept: list[float] = []
    report = kill_run(find_run(result.invocation_id), cluster, verify_s=2.0, sleep=slept.append)
    assert report.still_active == [result.job_ids[0]] and slept == [1.0, 1.0]


def test_kill_leaves_alone_a_job_of_another_run(tmp_path: Path, cluster: MemoryCluster) -> None:
    ours = submit_configs(configs(tmp_path / "a", execution=MEMORY), cluster)
    other = submit_configs(configs(tmp_path / "b", execution=MEMORY), cluster)
    (planted,) = read_jobs(other.run_dir).chain  # jobs.json may name any job of the user's
    append_jobs(ours.run_dir, "memory", [planted])
    report = kill_run(find_run(ours.invocation_id), cluster, sleep=lambda _: None)
    assert report.cancelled == [ours.job_ids[0]] and list(report.foreign) == [planted.id]
    assert cluster.state(planted.id) == "queued"


def test_resume_resubmits_only_unfinished_array_elements(tmp_path: Path,
                                                         cluster: MemoryCluster) -> None:
    result = submit_configs(configs(tmp_path, 4, execution=MEMORY), cluster)
    array, aggregate = result.job_ids
    cluster.set(array, "timeout")
    cluster.set(aggregate, "done")
    for model in ("model-00", "model-02"):
        for key in (ONE, TWO):
            finish_task(result.run_dir, model, key)
    finish_task(result.run_dir, "model-01", ONE)  # half done: the job skips it
    entries = resume_run(find_run(result.invocation_id), cluster)
    again, then = cluster.submits[2:]
    assert again.script == result.run_dir / "sweep.sbatch"  # the same dispatcher
    assert cluster.arrays[again.id] == (f"{again.id}_1", f"{again.id}_3")
    assert then.script.name == "aggregate.sbatch" and then.after == (again.id,)
    jobs = read_jobs(result.run_dir)
    assert jobs.ids == [array, aggregate, again.id, then.id]
    assert jobs.current(1).scheduler_id(1) == f"{again.id}_1"  # type: ignore[union-attr]
    assert jobs.current(0).id == array  # type: ignore[union-attr]
    assert entries[0].reason == "resume"


def test_resume_refuses_while_jobs_live_and_when_all_done(tmp_path: Path,
                                                          cluster: MemoryCluster) -> None:
    result = submit_configs(configs(tmp_path, execution=MEMORY), cluster)
    cluster.set(result.job_ids[0], "running")
    with pytest.raises(ResumeRefused, match="still has live work"):
        resume_run(find_run(result.invocation_id), cluster)
    cluster.set(result.job_ids[0], "failed")
    (entry,) = resume_run(find_run(result.invocation_id), cluster)
    with pytest.raises(ResumeRefused, match=f"already resumed as job {entry.id}"):
        resume_run(find_run(result.invocation_id), cluster)
    for key in (ONE, TWO):
        finish_task(result.run_dir, "solo", key)
    with pytest.raises(ResumeRefused, match="every task is done"):
        resume_run(find_run(result.invocation_id), cluster, force=True)


def test_usage_is_what_the_test_set_and_a_backend_without_a_cluster_uses_the_process_one(
        tmp_path: Path, cluster: MemoryCluster) -> None:
    from hpceval.backends import UsageQuery, backend_for

    result = submit_configs(configs(tmp_path, execution=MEMORY), cluster)
    (entry,) = read_jobs(result.run_dir).chain
    query = UsageQuery(entry.id, entry.submitted_at, result.run_dir, "solo")
    backend = backend_for("memory", client=cluster)
    assert backend.usage([query]) == [None]  # queued: it held nothing yet
    cluster.set(entry.id, "done", gpus=8, nodes=2, elapsed_s=1800)
    (used,) = backend.usage([query])
    assert used is not None and (used.gpu_hours, used.node_hours, used.final) == (4.0, 1.0, True)
    assert isinstance(backend_for("memory"), MemoryBackend)  # no client: the process's cluster
    assert backend_for("memory").usage([query]) == [None]  # ... which never saw this job
    stray = JobEntry("mem-999", "memory", "main", (0,), False, 0.0)
    assert backend.query([stray.id]) == {}


def test_jobs_of_no_run_ride_in_the_next_refresh(tmp_path: Path, cluster: MemoryCluster) -> None:
    """A watch's tick and its training job (Backend.job_states): passed with ask=False they
    ride in the run's refresh, and asking for them then costs no second call."""
    from hpceval.backends import JobRequest, backend_for

    result = submit_configs(configs(tmp_path, execution=MEMORY), cluster)
    tracker = Tracker(cluster)
    tracker.add(result.run_dir)
    backend = tracker.backend("memory")
    (tmp_path / "tick.sbatch").write_text("#!/bin/bash\n")
    (tick,) = backend_for("memory", client=cluster).submit(tmp_path, JobRequest("tick.sbatch"))
    cluster.set(tick.id, "running")
    assert backend.job_states([(tick.id, tick.submitted_at)], ask=False)[0].phase is (
        Phase.UNKNOWN)  # nothing asked yet
    tracker.refresh(force=True)
    assert cluster.asked("states") == [(result.job_ids[0], tick.id)]
    assert backend.job_states([(tick.id, tick.submitted_at)])[0].phase is Phase.RUNNING
    assert len(cluster.asked("states")) == 1  # answered by the refresh: no second call
    cluster.set(tick.id, "done")
    assert backend.job_states([(tick.id, tick.submitted_at)])[0].phase is Phase.RUNNING
    backend.job_states([(tick.id, tick.submitted_at)], ask=False)  # rides again ...
    assert backend.job_states([(tick.id, tick.submitted_at)])[0].phase is Phase.DONE  # asked
    assert len(cluster.asked("states")) == 2


def test_the_api_verbs_on_a_memory_run(tmp_path: Path, cluster: MemoryCluster) -> None:
    """tests/api/test_api.py's render, submit, status, kill, resume and cost, on a sweep of the
    memory scheduler: the API passes its client through to the plugin's backend."""
    from hpceval import api

    run_file = write_run_file(tmp_path, 2, execution=MEMORY)
    assert next(iter(api.render(run_file, profile="local-dev"))) == "sweep.sbatch"
    submitted = api.submit(run_file, profile="local-dev", client=cluster)
    array, aggregate = submitted.job_ids
    assert [job.script.name for job in cluster.submits] == ["sweep.sbatch", "aggregate.sbatch"]
    cluster.set(f"{array}_0", "running")
    (state,) = api.status([submitted.invocation_id], client=cluster)
    assert [m["state"] for m in state["models"]] == ["running", "queued"]
    report = api.kill(submitted.invocation_id, client=cluster)
    assert sorted(report.cancelled) == sorted([array, aggregate])
    cluster.set(f"{array}_0", "cancelled", gpus=4, nodes=1, elapsed_s=900)
    finish_task(submitted.run_dir, "model-00", ONE)
    finish_task(submitted.run_dir, "model-00", TWO)
    (entry, *_) = api.resume(api.find(str(submitted.run_dir)), client=cluster)
    assert entry.models == (1,) and cluster.arrays[entry.id] == (f"{entry.id}_1",)
    frame = api.cost_of([submitted.run_dir], client=cluster)
    every = frame[frame["task"] == "(all jobs)"].set_index("model")["gpu_hours"]
    assert every["model-00"] == 1.0  # 4 GPUs x 900 s, as the test said it held
