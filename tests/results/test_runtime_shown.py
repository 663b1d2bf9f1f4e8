"""What the server did, in `results --json` / parquet (a `runtime` object on each task's rows,
through api.results) and in the HTML report ("What the server did": a table and a tokens/s
chart per model); a bad runtime.json is shown as unknown with why, and breaks nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.reports import parquet_table
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval import api
from hpceval.cli.main import cli
from hpceval.results.report import html_report
from hpceval.results.runtime import TaskStats, write_runtime
from hpceval.results.table import results_frame
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


def stats(requests: int, **extra: Any) -> dict[str, Any]:
    counter = TaskStats()
    answer = {"choices": [{"finish_reason": "length", "message": {"content": "x"}}],
              "usage": {"prompt_tokens": 10, "completion_tokens": 7}}
    for _ in range(requests):
        counter.record(200, 0.25, False, answer)
    return {**counter.to_json(), "tokens_per_s": 12.5, **extra}


@pytest.fixture
def run(tmp_path: Path, fake: FakeSlurm) -> Path:
    """Two finished tasks of one model: ut_one with the proxy's file (and a field added by a
    later proxy), ut_two without one."""
    result = submit_configs(configs(tmp_path), fake)
    for key in (ONE, TWO):
        finish_task(result.run_dir, "solo", key)
    write_runtime(result.run_dir / "models" / "solo" / "tasks" / ONE,
                  stats(4, gpu_seconds=2, spec_accepts={"oom": 2}))
    return result.run_dir


def _rows(run: Path, *args: str) -> dict[str, Any]:
    out = CliRunner().invoke(cli, ["results", str(run), "--json", *args])
    assert out.exit_code == 0, out.output
    return {r["task"]: r for r in json.loads(out.output)}


def test_results_json_carries_the_runtime_of_each_task(run: Path, tmp_path: Path) -> None:
    rows = _rows(run)
    page = CliRunner().invoke(cli, ["results", str(run), "--json", "--html",
                                    str(tmp_path / "r.html")])  # from the wider frame
    assert page.exit_code == 0 and 'id="served"' in (tmp_path / "r.html").read_text()
    assert rows[ONE]["runtime"]["requests"] == 4
    assert rows[ONE]["runtime"]["finish_reasons"] == {"length": 4}
    assert rows[ONE]["runtime"]["spec_accepts"] == {"oom": 2}  # an extra field, as it is
    assert rows[TWO]["runtime"] is None  # no file: null
    assert [f.split(":")[0] for f in rows[ONE]["flags"]] == ["length"]  # beside the flags
    table = CliRunner().invoke(cli, ["results", str(run)]).output
    assert "runtime" not in table.splitlines()[0]  # the table stays one line per metric
    board = CliRunner().invoke(cli, ["results", str(run), "--leaderboard", "--json"]).output
    assert "runtime" not in board


def test_the_api_gives_the_same_column(run: Path) -> None:
    frame = api.results([str(run)], runtime=True)
    by_task = dict(zip(frame["task"], frame["runtime"], strict=True))
    assert by_task[ONE]["gpu_seconds"] == 2 and by_task[TWO] is None
    assert "runtime" not in api.results([str(run)]).columns  # asked for only


def test_parquet_holds_it_as_json_text(run: Path, tmp_path: Path) -> None:
    table = parquet_table(run, tmp_path)
    by_task = dict(zip(table["task"], table["runtime"], strict=True))
    assert json.loads(by_task[ONE])["requests"] == 4 and json.loads(by_task[TWO]) is None


@pytest.mark.parametrize("content, why", [
    (b'{"schema": 1, "requests": 4', "not valid JSON (truncated?)"),
    (json.dumps({"schema": 1, "requests": "four"}).encode(), 'requests = "four", not a number'),
    (b"{" + b" " * (1 << 20) + b"}", "larger than 1024 KiB"),
])
def test_a_bad_file_is_unknown_with_why_and_breaks_nothing(run: Path, tmp_path: Path,
                                                           content: bytes, why: str) -> None:
    (run / "models" / "solo" / "tasks" / ONE / "runtime.json").write_bytes(content)
    rows = _rows(run)
    assert why in rows[ONE]["runtime"]["unknown"]
    assert rows[ONE]["flags"] == []  # nothing read from it: no `length` flag either
    page = tmp_path / "r.html"
    out = CliRunner().invoke(cli, ["results", str(run), "--html", str(page)])
    assert out.exit_code == 0, out.output
    text = page.read_text()
    assert 'class="unknown"' in text and why.replace('"', "&quot;") in text


def test_a_foreign_file_is_not_read_anywhere(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = run / "models" / "solo" / "tasks" / ONE / "runtime.json"
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        uid = path.stat().st_uid
        monkeypatch.setattr("hpceval.trust.my_uids", lambda: frozenset({uid + 1}))
    unknown = _rows(run)[ONE]["runtime"]["unknown"]
    assert unknown.startswith("runtime.json is owned by") and unknown.endswith("not by you")


def test_the_report_shows_what_the_server_did(run: Path) -> None:
    frame = results_frame([run])
    page = html_report(frame, run_dirs=[run])
    section = page[page.index('<section id="served">'):]
    section = section[:section.index("</section>")]
    assert '<a href="#served">what the server did</a>' in page
    assert "<h3>solo · " in section
    head = ["task", "requests", "cached", "errors", "latency p50/p90/p99 ms", "tokens/s",
            "prompt tokens", "completion tokens", "finish reasons", "retries",
            "infra errors", "gpu_seconds", "spec_accepts"]
    assert "<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>" in section
    assert (f"<tr><td>{ONE}</td><td>4</td><td>0</td><td>0</td><td>250/250/250</td>"
            "<td>12.5</td><td>40</td><td>28</td><td>length 4</td><td>0</td><td>0</td><td>2</td>"
            "<td>oom 2</td></tr>"
            ) in section
    assert TWO not in section  # no file: no row
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in section and "tokens/s" in section
    assert "4 requests, 40 prompt / 28 completion tokens, 0 errors, gpu_seconds 2" in section
    # --task narrows it as it narrows the samples
    only_two = html_report(results_frame([run], tasks=["ut_two"]), run_dirs=[run])
    assert "No runtime.json for these tasks" in only_two


def test_run_names_are_escaped_in_the_section(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    finish_task(result.run_dir, "solo", ONE)
    folder = result.run_dir / "models" / "solo" / "tasks" / ONE
    write_runtime(folder, {**stats(1), "finish_reasons": {"<b>x</b>": 1}})
    page = html_report(results_frame([result.run_dir]), run_dirs=[result.run_dir])
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt; 1" in page
