"""Score against the training step: the table, its text/JSON/CSV, and the report's charts."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import click
import pandas as pd
import pytest
from support.checkpoints import PARTIAL, PENDING, SCORES, STALE, step_runs
from support.reports import ONE, TWO

from hpceval.cli.checkpoint_output import echo_step_results
from hpceval.results.checkpoints import render_steps, step_pivot, step_table
from hpceval.results.report import build_step_report, step_report_html
from hpceval.results.report.checkpoints import StepPoint, step_chart, y_range
from hpceval.results.table import COLUMNS, run_rows


@pytest.fixture
def points(tmp_path: Path) -> list[tuple[int, Path]]:
    return step_runs(tmp_path)


def test_table_has_each_finished_metric_with_its_step_in_step_order(
        points: list[tuple[int, Path]]) -> None:
    table = step_table(points)
    assert list(table["step"]) == sorted(table["step"])
    assert set(table["step"]) == {1000, 2000, 3000, 4000}  # 5000 has no result: absent
    for step, run_dir in points:
        rows = table[table["step"] == step]
        # the same rows the results table has for that run, plus the step
        if step != PENDING:
            pd.testing.assert_frame_equal(
                rows.drop(columns=["step", "tasks_done", "tasks_total"]).reset_index(drop=True),
                pd.DataFrame(run_rows(run_dir), columns=COLUMNS))
        for task, (value, _) in SCORES.get(step, {}).items():
            assert rows[rows["task"] == task]["value"].tolist() == [value]
    partial = table[table["step"] == PARTIAL]
    assert partial["task"].tolist() == [ONE]  # the half-written TWO never shows
    assert STALE not in table["value"].tolist()
    assert (partial["tasks_done"].tolist(), partial["tasks_total"].tolist()) == ([1], [2])
    whole = table[table["step"] == 1000]
    assert set(whole["tasks_done"]) == {2} and set(whole["tasks_total"]) == {2}


def test_no_points_and_no_results_give_an_empty_table(points: list[tuple[int, Path]]) -> None:
    pending = [p for p in points if p[0] == PENDING]
    assert step_table(pending).empty and step_table([]).empty
    assert render_steps(step_table(pending), "table") == "(no finished tasks at any step)\n"
    assert json.loads(render_steps(step_table(pending), "json")) == []
    with pytest.raises(TypeError, match="step must be an int"):
        step_table([("1000", pending[0][1])])  # type: ignore[list-item]


def test_a_retried_step_shows_its_newest_run(points: list[tuple[int, Path]],
                                             tmp_path: Path) -> None:
    from support.reports import finish

    (retry,) = step_runs(tmp_path / "retry", steps=(PARTIAL,))
    finish(retry[1], "solo", TWO, 0.5, 0.01, job={"job_id": "7"})
    table = step_table([*points, retry])
    pivot = step_pivot(table)
    assert pivot.loc[PARTIAL, TWO] == 0.5 and pivot.loc[PARTIAL, ONE] == 0.47
    assert (pivot.loc[PARTIAL, "tasks_done"], pivot.loc[PARTIAL, "tasks_total"]) == (2, 2)


def test_pivot_one_row_per_step_one_column_per_task(points: list[tuple[int, Path]]) -> None:
    pivot = step_pivot(step_table(points))
    assert list(pivot.index) == [1000, 2000, 3000, 4000]
    assert list(pivot.columns) == [ONE, TWO, "tasks_done", "tasks_total"]
    assert pivot.loc[2000, ONE] == 0.42 and pivot.loc[3000, TWO] == 0.22
    assert math.isnan(pivot.loc[PARTIAL, TWO])
    text = render_steps(step_table(points), "table")
    lines = text.splitlines()
    assert lines[0].split() == [ONE, TWO, "tasks_done", "tasks_total"]
    assert lines[1].split() == ["step"]
    assert lines[3].split() == ["2000", "0.42", "0.15", "2", "2"]
    assert lines[5].split() == ["4000", "0.47", "NaN", "1", "2"]
    records = json.loads(render_steps(step_table(points), "json"))
    assert [r["step"] for r in records] == [1000, 2000, 3000, 4000]
    assert records[3] == {"step": 4000, ONE: 0.47, TWO: None, "tasks_done": 1, "tasks_total": 2}
    csv = render_steps(step_table(points), "csv").splitlines()
    assert csv[0] == f"step,{ONE},{TWO},tasks_done,tasks_total" and csv[1].startswith("1000,")
    long = json.loads(render_steps(step_table(points), "json", long=True))
    assert {r["metric"] for r in long} == {"exact_match"} and long[0]["step"] == 1000


def test_cli_helper_json_and_html(points: list[tuple[int, Path]], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "steps.html"
    echo_step_results(points, as_json=True, html_file=str(page))
    out = capsys.readouterr()
    assert [r["step"] for r in json.loads(out.out)] == [1000, 2000, 3000, 4000]
    assert f"report: {page}" in out.err and page.read_text().count('class="step-chart"') == 2
    with pytest.raises(click.UsageError, match="--json is --format json"):
        echo_step_results(points, fmt="csv", as_json=True)
    echo_step_results(points, fmt="csv", output=str(tmp_path / "s.csv"))
    assert "wrote 4 rows" in capsys.readouterr().err
    assert (tmp_path / "s.csv").read_text().splitlines()[4].startswith("4000,0.47,,1,2")


def _circles(svg: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', c))
            for c in re.findall(r"<circle [^>]*>", svg)]


def test_chart_plots_each_score_at_its_step(points: list[tuple[int, Path]],
                                            tmp_path: Path) -> None:
    page = build_step_report(points, tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert html == step_report_html(page).replace(
        re.search(r"Generated [^<]* by", step_report_html(page)).group(0),  # type: ignore[union-attr]
        re.search(r"Generated [^<]* by", html).group(0))  # type: ignore[union-attr]
    charts = re.findall(r'<svg [^>]*class="step-chart".*?</svg>', html, re.S)
    assert len(charts) == 2
    for svg, task in zip(charts, (ONE, TWO), strict=True):
        head = dict(re.findall(r'([\w-]+)="([^"]*)"', svg.split(">", 1)[0]))
        assert head["data-task"] == task
        lo, hi = float(head["data-ymin"]), float(head["data-ymax"])
        top, height = float(head["data-top"]), float(head["data-plot-height"])
        circles = _circles(svg)
        expected = sorted((s, v[task][0]) for s, v in SCORES.items() if task in v)
        assert [(int(c["data-step"]), float(c["data-value"])) for c in circles] == expected
        xs = [float(c["cx"]) for c in circles]
        assert xs == sorted(xs) and len(set(xs)) == len(xs)
        for c in circles:  # the drawn height is the score on the axis
            want = top + (hi - float(c["data-value"])) / (hi - lo) * height
            assert float(c["cy"]) == pytest.approx(want, abs=0.01)
    # one x axis for every chart of the page: step 3000 sits at the same x in both
    at_3000 = [c["cx"] for svg in charts for c in _circles(svg) if c["data-step"] == "3000"]
    assert len(at_3000) == 2 and at_3000[0] == at_3000[1]
    two = _circles(charts[0])[1]
    assert (two["data-step"], float(two["data-value"])) == ("2000", SCORES[2000][ONE][0])
    # whiskers for every point with a stderr: ONE 4, TWO 2 (2000 has none, 4000 is partial)
    assert [svg.count('class="ci"') for svg in charts] == [4, 2]
    assert re.search(r'<span class="partial">1/2 partial</span>', html)
    assert str(STALE) not in html and "steps 1,000 to 4,000" in html


def test_y_axis_fits_the_data_and_stays_in_0_1() -> None:
    lo, hi = y_range([StepPoint(1, 0.40, 0.01), StepPoint(2, 0.45, None)])
    assert 0.3 < lo < 0.3804 and 0.45 < hi < 0.5
    assert y_range([StepPoint(1, 0.0, 0.05), StepPoint(2, 1.0, None)]) == (0.0, 1.0)
    one = step_chart("t", "m", [("solo", [StepPoint(5, 0.5, None)])])
    assert one.count("<circle") == 1 and "<polyline" not in one


def test_many_points_label_first_last_and_best_and_escape_names() -> None:
    pts = [StepPoint(s * 100, 0.1 + (0.8 if s == 17 else 0.01 * s), 0.01)
           for s in range(1, 51)]
    svg = step_chart("<b>t</b>", "m", [("<i>m</i>", pts)])
    assert svg.count("<circle") == 50
    labels = re.findall(r'class="point-label"[^>]*>([^<]*)<', svg)
    assert labels == ["0.11", "0.9", "0.6"]  # first, best (step 1,700), last
    assert "<b>t" not in svg and "&lt;b&gt;t" in svg and "<i>m" not in svg


def _rows(models: list[str], steps: tuple[int, ...], model_of_step: bool = False
          ) -> pd.DataFrame:
    return pd.DataFrame([
        {"step": step, "invocation_id": f"i{step}", "model": f"{m}-{step}" if model_of_step
         else m, "task": "h.t", "subtask": "t", "metric": "acc", "filter": None,
         "value": 0.2 + n * 0.3 + step / 100, "stderr": None, "primary": True,
         "run_dir": "/nonexistent", "tasks_done": 2, "tasks_total": 2}
        for n, m in enumerate(models) for step in steps]).sort_values("step", kind="stable")


def test_several_models_get_a_line_and_a_column_each() -> None:
    table = _rows(["a", "b"], (1, 2, 3))
    assert list(step_pivot(table).columns) == ["a: h.t", "b: h.t", "tasks_done", "tasks_total"]
    page = step_report_html(table)
    assert page.count('<g class="series"') == 2 and page.count("<circle") == 6


def test_a_model_key_that_changes_with_the_checkpoint_is_still_one_line() -> None:
    table = _rows(["ckpt"], (1, 2, 3), model_of_step=True)  # ckpt-1, ckpt-2, ckpt-3
    assert list(step_pivot(table).columns) == ["h.t", "tasks_done", "tasks_total"]
    page = step_report_html(table)
    assert page.count('<g class="series"') == 1 and page.count("<polyline") == 1
    assert 'data-model="ckpt-3"' in page and page.count("<circle") == 3


def test_numpy_steps_are_accepted(points: list[tuple[int, Path]]) -> None:
    import numpy as np

    table = step_table([(np.int64(s), d) for s, d in points])
    assert table["step"].tolist() == step_table(points)["step"].tolist()
