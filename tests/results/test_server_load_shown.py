"""The servers' load (server-load.json) in `results --json` / parquet (a `server_load` object on
each row: its model's summary and last sample) and in the HTML report (per model, its peaks and
means and two SVG charts: requests waiting and running, output tokens/s); a bad file is shown
as unknown with why and breaks nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.reports import parquet_table
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.contract import SERVER_LOAD_FILE, model_dir
from hpceval.results.report import html_report
from hpceval.results.report.charts import time_chart
from hpceval.results.server_load import LoadSeries, write_server_load
from hpceval.results.table import results_frame
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


@pytest.fixture
def run(tmp_path: Path, fake: FakeSlurm) -> Path:
    """One model, both tasks done, no runtime.json, and a load file of 2,000 polls (merged
    down to at most 600 points): a queue that builds up then drains, one restart (no rate)."""
    result = submit_configs(configs(tmp_path), fake)
    for key in (ONE, TWO):
        finish_task(result.run_dir, "solo", key)
    series = LoadSeries(5.0)
    for i in range(2000):
        waiting = max(0, 40 - abs(i - 1000) // 10)
        series.add(1_767_268_800.0 + 5 * i, waiting, 64, 0.5 + waiting / 100,
                   None if i in (0, 1500) else 800.0 + i % 7, 5000.0)
    write_server_load(model_dir(result.run_dir, "solo") / SERVER_LOAD_FILE, series.to_json())
    return result.run_dir


def _rows(run: Path) -> dict[str, Any]:
    out = CliRunner().invoke(cli, ["results", str(run), "--json"])
    assert out.exit_code == 0, out.output
    return {r["task"]: r for r in json.loads(out.output)}


def _section(page: str) -> str:
    section = page[page.index('<section id="served">'):]
    return section[:section.index("</section>")]


def test_results_json_carries_the_model_s_server_load_on_each_row(run: Path,
                                                                   tmp_path: Path) -> None:
    rows = _rows(run)
    for task in (ONE, TWO):
        load = rows[task]["server_load"]
        assert load["samples"] == 2000 and load["summary"]["waiting"]["peak"] == 40
        assert "points" not in load and load["last"]["running"] == 64
    table = parquet_table(run, tmp_path)
    assert json.loads(table["server_load"].iloc[0])["samples"] == 2000


def test_the_report_draws_queue_depth_and_tokens_per_s_per_model(run: Path) -> None:
    section = _section(html_report(results_frame([run]), run_dirs=[run]))
    assert "<h3>solo · " in section and "<table" not in section  # no runtime.json: no table
    assert "Server load from /metrics: waiting peak 40 (mean " in section
    charts = re.findall(r'<svg [^>]*class="chart timeline".*?</svg>', section, re.S)
    assert len(charts) == 2
    queue, tokens = charts
    assert "requests in the server" in queue and "waiting (peak 40)" in queue
    assert "running (peak 64)" in queue
    assert "output tokens/s" in tokens and "generated (peak 80" in tokens
    lines = re.findall(r'points="([^"]*)"', queue)
    assert len(lines) == 2 and all(len(p.split()) <= 600 for p in lines)
    assert len(re.findall(r'points="([^"]*)"', tokens)) >= 1
    assert "<script" not in section  # SVG only, no JS library


def test_a_bad_load_file_is_a_line_saying_why(run: Path) -> None:
    (model_dir(run, "solo") / SERVER_LOAD_FILE).write_text('{"schema": 1, "poi')
    section = _section(html_report(results_frame([run]), run_dirs=[run]))
    assert "server load unknown: server-load.json is not valid JSON (truncated?)" in section
    assert _rows(run)[ONE]["server_load"] == {
        "unknown": "server-load.json is not valid JSON (truncated?)"}


def test_a_model_narrowed_away_has_no_load_and_no_file_says_so(run: Path, tmp_path: Path,
                                                               fake: FakeSlurm) -> None:
    other = submit_configs(configs(tmp_path / "other"), fake)
    finish_task(other.run_dir, "solo", ONE)
    section = _section(html_report(results_frame([other.run_dir]), run_dirs=[other.run_dir]))
    assert "No runtime.json for these tasks, no server-load.json" in section
    assert _rows(other.run_dir)[ONE]["server_load"] is None


def test_names_are_escaped_and_gaps_break_the_line() -> None:
    svg = time_chart("<b>m</b>", [0.0, 60.0, 120.0, 180.0],
                     [("a<i>", [1.0, None, 3.0, 4.0]), ("none", [None] * 4)], "x")
    assert "<b>" not in svg and "&lt;b&gt;m&lt;/b&gt;" in svg and "a&lt;i&gt;" in svg
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 1  # [1] alone, [3, 4]
    assert "none (unknown)" in svg and "3 min" in svg


def judge_series() -> LoadSeries:
    """A judge's three polls: waiting 0 to 2, 2 running, KV 25 %, 100 tokens/s out."""
    series = LoadSeries(5.0)
    for i in range(3):
        series.add(1_767_268_800.0 + 5 * i, i, 2, 0.25, 100.0, 50.0)
    return series


def test_info_shows_each_judge_s_load_after_the_models(run: Path) -> None:
    """A judge's proxy samples its servers as the model's does, beside its own progress file:
    in the model's folder (a judge in the model's job) or the run's (a sweep's judge job)."""
    series = judge_series()
    judge = model_dir(run, "solo") / "auxiliary" / "judge"
    judge.mkdir(parents=True)
    write_server_load(judge / SERVER_LOAD_FILE, series.to_json())
    (model_dir(run, "solo") / "auxiliary" / "idle-judge").mkdir()  # no file: no line
    out = CliRunner().invoke(cli, ["info", str(run)])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if line.startswith("server     ")]
    assert [line.split(":")[0] for line in lines] == [
        "server     solo", "server     solo/auxiliary/judge"], lines
    assert "waiting peak 2" in lines[1], lines
    data = json.loads(CliRunner().invoke(cli, ["info", str(run), "--json"]).output)
    assert set(data["server_load"]) == {"solo", "solo/auxiliary/judge"}
    assert data["server_load"]["solo/auxiliary/judge"]["samples"] == 3


def test_the_report_draws_each_judge_s_load_in_its_model_s_section(run: Path) -> None:
    """Issue 36 item 2: a judge served in the model's job has its own load charts under the
    model's, labelled; a judge folder without a file adds nothing."""
    series = judge_series()
    judge = model_dir(run, "solo") / "auxiliary" / "grader"
    judge.mkdir(parents=True)
    write_server_load(judge / SERVER_LOAD_FILE, series.to_json())
    (model_dir(run, "solo") / "auxiliary" / "idle-judge").mkdir()
    section = _section(html_report(results_frame([run]), run_dirs=[run]))
    assert '<h4 class="judge-load">judge grader</h4>' in section and "idle-judge" not in section
    charts = re.findall(r'<svg [^>]*class="chart timeline".*?</svg>', section, re.S)
    assert len(charts) == 4  # the model's two, then the judge's two
    assert "solo judge grader: requests in the server" in charts[2]
    assert "waiting (peak 2)" in charts[2] and "generated (peak 100" in charts[3]
