"""`hpceval watch start`, `ls watches`, `results`/`report`/`kill WATCH` and the Python API:
bad input refused with exit 2 before anything is submitted, and what each command shows.

The ticks and the state they keep: test_watch.py; a watch on the real dev cluster:
tests/integration/test_watch_drill.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.runs import write_run_file
from support.slurm import FakeSlurm
from support.watches import started, write_ckpt

from hpceval.cli.main import cli
from hpceval.watch import state as st
from hpceval.watch.tick import run_tick


def test_ls_watches_lists_this_users_watches_with_their_counts(tmp_path: Path,
                                                               fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="OK")
    write_ckpt(tmp_path / "ckpts", "step_10", {"OK": "", "w": "1"})
    write_ckpt(tmp_path / "ckpts", "step_20", {"w": "half"})  # no marker: seen, pending
    assert run_tick(watch_dir, client=fake).submitted == ["step_10"]
    out = CliRunner().invoke(cli, ["ls", "watches", "--json"])
    assert out.exit_code == 0, out.output
    [row] = json.loads(out.output)
    assert (row["watch_id"], row["status"], row["seen"], row["submitted"]) == (
        watch_dir.name, "watching", 2, 1)
    text = CliRunner().invoke(cli, ["ls", "watches"]).output
    assert watch_dir.name in text and "watching" in text


@pytest.fixture
def no_sbatch(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("sbatch must not run")

    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient.submit", refuse)


def _start(tmp_path: Path, *args: str) -> Any:
    (tmp_path / "ckpts").mkdir(exist_ok=True)
    run_file = tmp_path / "run.yaml"
    if not run_file.exists():
        write_run_file(tmp_path)
    return CliRunner().invoke(cli, ["watch", "start", str(run_file), "--profile", "local-dev",
                                    "--checkpoints", str(tmp_path / "ckpts"), *args])


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "execution.nodes=zero"], "execution.nodes"),
    (["-o", "deployment.type=vllm", "-o", "deployment.tensor_parallel_size=3"], "GPU"),
    (["--interval", "5s"], "below the minimum of 60 s"),
    (["--step-regex", r"(\d+)_(\d+)"], "has 2 groups"),
    (["--marker", "/abs"], "not a file name inside a checkpoint"),
    (["--marker", "OK", "--grace", "5m"], "--grace"),
    (["--after-job", "12;rm"], "is not a job id"),
    (["-o", "execution.type=local"], "cannot queue a job for later"),
    (["-o", "models=[{name: a}, {name: b}]"], "a sweep of 2 models"),
    (["-o", "deployment={type: none}", "-o", "target.api_endpoint.url=http://x/v1",
      "-o", "target.api_endpoint.model_id=m"], "none serves no checkpoint"),
])
def test_start_refuses_bad_input_with_exit_2_and_submits_nothing(
        tmp_path: Path, no_sbatch: None, args: list[str], message: str) -> None:
    result = _start(tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "out").exists()  # no watch directory, no run directory


def test_start_checks_the_checkpoint_folder_and_a_sample_checkpoint(
        tmp_path: Path, no_sbatch: None) -> None:
    result = CliRunner().invoke(cli, ["watch", "start", str(write_run_file(tmp_path)),
                                      "--profile", "local-dev", "--checkpoints",
                                      str(tmp_path / "missing")])
    assert result.exit_code == 2 and "--checkpoints" in result.output
    (tmp_path / "ckpts" / "step_1").mkdir(parents=True)  # exists but empty: preflight says so
    result = _start(tmp_path)
    assert result.exit_code == 2 and "deployment.checkpoint_path" in result.output


def test_dry_run_prints_the_tick_script_and_writes_nothing(tmp_path: Path,
                                                           no_sbatch: None) -> None:
    result = _start(tmp_path, "--interval", "2m", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "--begin=now+120" in result.output
    assert "-m hpceval.job watch-tick --watch-dir" in result.output
    assert not (tmp_path / "out").exists()


def test_results_and_report_of_a_watch_plot_score_against_step(tmp_path: Path,
                                                              fake: FakeSlurm) -> None:
    from support.runs import finish_task

    watch_dir = started(tmp_path, fake, marker="OK")
    for step in (2000, 1000, 3000):
        write_ckpt(tmp_path / "ckpts", f"step_{step}", {"OK": ""})
    run_tick(watch_dir, client=fake)
    state = st.load_state(watch_dir)
    for name in ("step_1000", "step_2000"):  # step_3000's run has no finished task yet
        run_dir = Path(str(state.checkpoints[name].run_dir))
        finish_task(run_dir, "solo", "ut-harness.ut_one")
    result = CliRunner().invoke(cli, ["results", watch_dir.name, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["step"] for r in rows] == [1000, 2000]
    assert all(r["tasks_done"] == 1 and r["tasks_total"] == 2 for r in rows)
    long = CliRunner().invoke(cli, ["results", watch_dir.name, "--json", "--long"])
    assert {r["step"] for r in json.loads(long.output)} == {1000, 2000}
    refused = CliRunner().invoke(cli, ["results", watch_dir.name, "--leaderboard"])
    assert refused.exit_code == 2 and "shown alone" in refused.output
    out = tmp_path / "steps.html"
    result = CliRunner().invoke(cli, ["report", watch_dir.name, "-O", str(out), "--no-cost"])
    assert result.exit_code == 0, result.output
    assert "score vs training step" in out.read_text() and "3 checkpoints" in result.output


def test_kill_watch_stops_it_and_cancels_its_evaluations(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **kw: fake)
    watch_dir = started(tmp_path, fake, marker="OK")
    for step in (1, 2):
        write_ckpt(tmp_path / "ckpts", f"step_{step}", {"OK": ""})
    run_tick(watch_dir, client=fake)
    state = st.load_state(watch_dir)
    evals = [(e.job_ids or [])[0] for e in state.checkpoints.values()]
    tick = state.ticks[-1].id
    fake.states.update({j: "RUNNING" for j in [*evals, tick]})
    result = CliRunner().invoke(cli, ["kill", watch_dir.name])
    assert result.exit_code == 0, result.output
    cancelled = {j for call in fake.cancels for j in call}
    assert cancelled == {*evals, tick}
    assert st.load_state(watch_dir).status == st.STOPPED
    assert "verified: nothing of this watch is queued or running" in result.output


def test_python_api_mirrors_the_cli(tmp_path: Path, fake: FakeSlurm) -> None:
    from support.runs import finish_task

    from hpceval import api
    from hpceval.config.errors import ConfigError

    (tmp_path / "ckpts").mkdir()
    with pytest.raises(ConfigError, match="below the minimum"):
        api.watch(write_run_file(tmp_path), tmp_path / "ckpts", profile="local-dev",
                  interval_s=5, client=fake)
    started_ = api.watch(write_run_file(tmp_path), tmp_path / "ckpts", profile="local-dev",
                         marker="OK", interval_s=120, client=fake)
    write_ckpt(tmp_path / "ckpts", "step_7", {"OK": ""})
    run_tick(started_.watch_dir, client=fake)
    assert api.watch_status(started_.watch_id, client=fake)["summary"]["running"] == 1
    entry = st.load_state(started_.watch_dir).checkpoints["step_7"]
    finish_task(Path(str(entry.run_dir)), "solo", "ut-harness.ut_one")
    assert list(api.watch_steps(started_.watch_id)["step"]) == [7]
