"""Results across runs: tables, leaderboard, formats, HTML report, exports (idempotent)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner
from support.runs import configs
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.results.export import export_local, export_mlflow, wandb_run_id
from hpceval.results.report import html_report
from hpceval.results.store import finalize_task
from hpceval.results.table import aggregate, leaderboard, render, results_frame
from hpceval.runs.submit import submit_configs
from hpceval.tasks.result import Metric, TaskResult

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"
SCORES = {("model-00", ONE): 0.8, ("model-00", TWO): 0.4,
          ("model-01", ONE): 0.6, ("model-01", TWO): 0.9}


def _finish(run_dir: Path, model: str, task: str, value: float) -> None:
    short = task.split(".")[-1]
    metrics = [Metric(short, "exact_match", value, 0.05, "strict-match", 100),
               Metric(short, "exact_match", value / 2, 0.05, "flexible-extract", 100),
               Metric(f"{short}_sub", "acc", 0.123)]
    result = TaskResult(task, "ut-harness", "1.0", metrics)
    finalize_task(run_dir / "models" / model / "tasks" / task, result.to_json(), {})


@pytest.fixture
def sweep(tmp_path: Path, fake: FakeSlurm) -> Path:
    result = submit_configs(configs(tmp_path, 2), fake)
    for (model, task), value in SCORES.items():
        _finish(result.run_dir, model, task, value)
    # an unfinished task with results but no done marker must not count
    partial = result.run_dir / "models" / "model-01" / "tasks" / "zz.partial"
    partial.mkdir(parents=True)
    (partial / "results.json").write_text("{}")
    return result.run_dir


def test_long_table_and_leaderboard(sweep: Path) -> None:
    frame = results_frame([sweep])
    assert len(frame) == 12 and set(frame["model"]) == {"model-00", "model-01"}
    primary = frame[frame["primary"]]
    assert set(primary["filter"]) == {"strict-match"}  # first metric of the task itself
    board = leaderboard(frame)
    assert list(board.index) == ["model-01", "model-00"]  # sorted by mean: 0.75 > 0.6
    for (model, task), value in SCORES.items():
        assert board.loc[model, task] == pytest.approx(value)
    assert board.loc["model-00", "mean"] == pytest.approx(0.6)
    by_metric = leaderboard(frame, "acc")
    assert by_metric.loc["model-00", ONE] == pytest.approx(0.123)
    only = results_frame([sweep], models=["model-01"], tasks=["ut_two"])
    assert set(only["model"]) == {"model-01"} and set(only["task"]) == {TWO}


def test_formats(sweep: Path, tmp_path: Path) -> None:
    frame = results_frame([sweep])
    rows = json.loads(render(frame, "json"))
    assert rows[0]["model"] == "model-00" and "value" in rows[0]
    assert render(frame, "csv").splitlines()[0].startswith("invocation_id,model,task")
    markdown = render(leaderboard(frame), "markdown", index=True)
    assert markdown.splitlines()[0] == f"| model | {ONE} | {TWO} | mean | run |"
    out = CliRunner().invoke(cli, ["results", "--format", "parquet", "-O",
                                   str(tmp_path / "r.parquet"), "--run", str(sweep)])
    assert out.exit_code == 0, out.output
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / "r.parquet")) == 12


def test_results_cli_filters_leaderboard_and_html(sweep: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    out = CliRunner().invoke(cli, ["results", "--leaderboard", "--model", "model-00",
                                   "--html", str(report)])
    assert out.exit_code == 0, out.output
    assert "model-00" in out.output and "model-01" not in out.output
    page = report.read_text()
    assert page.count("<svg") == 2 and f"<h3>{ONE}</h3>" in page
    assert "0.8 (95% CI 0.711–0.867, Wilson)" in page  # 80 of 100, not 0.8 ± 1.96 x 0.05


def test_the_leaderboard_names_its_run_in_every_format(sweep: Path, tmp_path: Path) -> None:
    """--json keeps every field it had and adds `run`; the table and the report's
    leaderboard show it."""
    run_id = json.loads((sweep / "run.json").read_text())["invocation_id"]
    out = CliRunner().invoke(cli, ["results", "--leaderboard", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["model"]: r for r in json.loads(out.output)}
    assert set(rows["model-00"]) == {"model", ONE, TWO, "mean", "run"}
    assert rows["model-00"]["run"] == run_id and rows["model-01"]["run"] == run_id
    table = CliRunner().invoke(cli, ["results", "--leaderboard"])
    assert table.exit_code == 0 and f"mean  {'run'.rjust(len(run_id))}" in table.output, \
        table.output
    page = html_report(results_frame([sweep]), run_dirs=[sweep])
    board = page[page.index('id="leaderboard"'):page.index('id="comparison"')]
    assert "<th>run</th>" in board and f"<td>{run_id}</td>" in board


def test_html_escapes_names() -> None:
    import pandas as pd

    frame = pd.DataFrame([{"invocation_id": "i", "model": "<script>x</script>", "task": "t&t",
                           "subtask": "t", "metric": "m", "filter": None, "value": 0.5,
                           "stderr": None, "primary": True}])
    page = html_report(frame)
    assert "<script>x" not in page and "&lt;script&gt;x" in page


def test_aggregate_writes_the_run_table(sweep: Path) -> None:
    aggregate(sweep)
    assert (sweep / "results.csv").read_text().count("\n") == 13
    assert (sweep / "results.parquet").is_file()


def test_local_export_is_idempotent(sweep: Path, tmp_path: Path) -> None:
    frame = results_frame([sweep])
    (path,) = export_local(frame, tmp_path / "exp", "json")
    first, mtime = path.read_bytes(), path.stat().st_mtime_ns
    (again,) = export_local(results_frame([sweep]), tmp_path / "exp", "json")
    assert again.read_bytes() == first and again.stat().st_mtime_ns == mtime
    (csv,) = export_local(frame, tmp_path / "exp", "csv")
    assert csv.suffix == ".csv"


class _FakeMlflow:
    """The MlflowClient surface export_mlflow uses, in memory."""

    runs: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, tracking_uri: str | None = None) -> None:
        self.experiments: dict[str, str] = {}

    def get_experiment_by_name(self, name: str) -> Any:
        return types.SimpleNamespace(experiment_id="1")

    def search_runs(self, ids: list[str], filter_string: str, max_results: int) -> list[Any]:
        key = filter_string.split("= '", 1)[1][:-1]
        return [types.SimpleNamespace(info=types.SimpleNamespace(run_id=rid),
                                      data=types.SimpleNamespace(metrics=dict(r["metrics"])))
                for rid, r in self.runs.items() if r["tags"]["hpceval.key"] == key]

    def create_run(self, exp: str, tags: dict[str, str], run_name: str) -> Any:
        rid = f"run{len(self.runs)}"
        self.runs[rid] = {"tags": tags, "metrics": {}, "logged": 0}
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id=rid))

    def log_batch(self, run_id: str, metrics: list[Any], params: list[Any]) -> None:
        self.runs[run_id]["logged"] += len(metrics)
        self.runs[run_id]["metrics"].update({m.key: m.value for m in metrics})

    def set_terminated(self, run_id: str) -> None:
        pass


def test_mlflow_export_maps_each_result_to_one_run(sweep: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    entity = types.SimpleNamespace(
        Metric=lambda k, v, t, s: types.SimpleNamespace(key=k, value=v),
        Param=lambda k, v: types.SimpleNamespace(key=k, value=v))
    monkeypatch.setitem(sys.modules, "mlflow", types.ModuleType("mlflow"))
    monkeypatch.setitem(sys.modules, "mlflow.entities", entity)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "mlflow.tracking",
                        types.SimpleNamespace(MlflowClient=_FakeMlflow))  # type: ignore[arg-type]
    _FakeMlflow.runs = {}
    frame = results_frame([sweep])
    first = export_mlflow(frame)
    assert (first.created, first.updated, first.unchanged) == (4, 0, 0)
    again = export_mlflow(frame)
    assert (again.created, again.updated, again.unchanged) == (0, 0, 4)
    assert len(_FakeMlflow.runs) == 4
    assert all(r["logged"] == 3 for r in _FakeMlflow.runs.values())


def test_real_mlflow_export_is_idempotent(sweep: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow", reason="mlflow is an optional extra (hpceval[mlflow])")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = f"file://{tmp_path / 'mlruns'}"
    frame = results_frame([sweep])
    assert export_mlflow(frame, tracking_uri=uri).created == 4
    assert export_mlflow(frame, tracking_uri=uri).unchanged == 4
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("hpceval")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 4
    history = client.get_metric_history(runs[0].info.run_id, "ut_one.exact_match.strict-match")
    assert len(history) <= 1


def test_missing_extras_say_how_to_install(sweep: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # type: ignore[arg-type]
    out = CliRunner().invoke(cli, ["export", "--dest", "wandb", "--run", str(sweep)])
    assert out.exit_code == 1 and "pip install 'hpceval[wandb]'" in out.output
    assert wandb_run_id("a/b/c") == wandb_run_id("a/b/c") != wandb_run_id("a/b/d")


def test_real_wandb_offline_export_is_idempotent(sweep: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="wandb is an optional extra (hpceval[wandb])")
    from hpceval.results.export import export_wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    frame = results_frame([sweep])
    assert export_wandb(frame, directory=tmp_path).created == 4
    assert export_wandb(frame, directory=tmp_path).created == 4
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    # Re-export reuses each result's deterministic run id: 4 ids over 8 offline run folders.
    # (The id is read from run-<id>.wandb: folder names get a -1 suffix within one second.)
    ids = {f.stem.removeprefix("run-") for p in runs for f in p.glob("run-*.wandb")}
    assert len(runs) == 8 and len(ids) == 4
