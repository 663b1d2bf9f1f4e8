"""The rough edges a newcomer hits first: watch table, positional RUN, empty ids, --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.runs.index import RunNotFound, find_run
from hpceval.runs.state import Tracker
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


def _plain(renderable: object, width: int = 160) -> str:
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False).print(renderable)
    return out.getvalue()


def _watch_table(tmp_path: Path, fake: FakeSlurm, progress: dict[str, object],
                 tasks: int = 2) -> object:
    from hpceval.runs.display import rich_states

    result = submit_configs(configs(tmp_path, tasks=tasks), fake)
    model_dir = result.run_dir / "models" / "solo"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "progress.json").write_text(json.dumps(progress))
    fake.states[result.job_ids[0]] = "RUNNING"
    tracker = Tracker(fake)
    tracker.add(result.run_dir)
    (table,) = rich_states(tracker.refresh(force=True)).renderables
    return table


def test_watch_table_every_column_has_a_header(tmp_path: Path, fake: FakeSlurm) -> None:
    table = _watch_table(tmp_path, fake, {"requests": {"done": 7, "expected": 20}})
    headers = [str(c.header) for c in table.columns]  # type: ignore[attr-defined]
    assert all(h.strip() for h in headers), headers
    assert {"tasks", "requests"} <= set(headers)


def test_watch_table_request_count_sits_under_requests(tmp_path: Path, fake: FakeSlurm) -> None:
    # No expected total (one instance, or a harness that does not say): the count still shows.
    table = _watch_table(tmp_path, fake, {"requests": {"done": 120, "failed": 0},
                                          "rate_per_s": 4.0})
    cols = {str(c.header): [_plain(cell) for cell in c._cells]  # type: ignore[attr-defined]
            for c in table.columns}  # type: ignore[attr-defined]
    assert "120" in cols["requests"][0]
    assert "120" not in cols["detail"][0] and "4.0/s" in cols["detail"][0]


def test_task_bar_of_nothing_done_is_empty(tmp_path: Path) -> None:
    from hpceval.runs.display import bar

    none, half, full = (_plain(bar(done, total, width=12)) for done, total in
                        ((0, 1, ), (1, 2), (1, 1)))
    assert none != full and none != half != full  # told apart without colour
    assert "0/1" in none and "1/1" in full
    empty = _plain(bar(0, 0, width=12))
    assert "0/0" in empty and empty != full


def test_results_and_export_take_a_positional_run(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    finish_task(result.run_dir, "solo", ONE)
    prefix = result.invocation_id[:18]
    out = CliRunner().invoke(cli, ["results", prefix, "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert out.output.count("\n") == 2 and ONE in out.output
    again = CliRunner().invoke(cli, ["results", "--run", prefix, "--format", "csv"])
    assert again.output == out.output
    exported = CliRunner().invoke(cli, ["export", prefix, "-O", str(tmp_path / "exp")])
    assert exported.exit_code == 0, exported.output
    assert len(list((tmp_path / "exp").iterdir())) == 1


def test_results_json_flag(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    finish_task(result.run_dir, "solo", ONE)
    out = CliRunner().invoke(cli, ["results", result.invocation_id, "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    assert row["task"] == ONE and row["value"] == 0.5


@pytest.mark.parametrize("ref", ["", " ", "\t\n"])
def test_empty_run_ids_are_refused_not_prefix_matched(ref: str, tmp_path: Path,
                                                      fake: FakeSlurm,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    result = submit_configs(configs(tmp_path), fake)  # the only known run
    (result.run_dir.parent).mkdir(exist_ok=True)
    monkeypatch.chdir(result.run_dir)  # '' must not read as "the current directory" either
    with pytest.raises(RunNotFound, match="empty"):
        find_run(ref)
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    for command in (["kill", ref], ["status", ref], ["results", ref], ["info", ref],
                    ["results", "--run", ref]):
        out = CliRunner().invoke(cli, command)
        assert out.exit_code != 0 and "empty" in out.output, (command, out.output)
    assert fake.cancels == []


def test_json_read_commands_print_json_when_there_is_nothing(tmp_path: Path) -> None:
    for command in (["status", "--json"], ["ls", "runs", "--json"], ["results", "--json"],
                    ["results", "--cost", "--json"]):
        out = CliRunner().invoke(cli, command)
        assert out.exit_code == 0, (command, out.output)
        assert json.loads(out.output) == [], (command, out.output)
