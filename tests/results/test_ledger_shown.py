"""Each job's ledger (results.ledger) beyond its lines in `info`: `results --json` / parquet (a
`ledger` object on each row: its model's jobs and their sums), `info` (the run's sums, text and
--json) and the HTML report (per run its GPU-hours by phase, per model a stacked bar per job in
SVG); a ledger that is damaged or not the user's is unknown with the reason and breaks nothing."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.reports import parquet_table
from support.runs import configs, finish_task, ledger_marks, submitted
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.contract import LEDGER_FILE, MANIFEST_FILE, aux_dir, model_dir
from hpceval.results.ledger_view import JOBS_LISTED
from hpceval.results.report import html_report
from hpceval.results.table import results_frame
from hpceval.runs.jobs import read_jobs
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"
FULL = ((0, "start"), (3, "launched"), (50, "ready"), (170, "tasks_done"), (171, "teardown"),
        (180, "end"))
LINE = ("of 0.20 GPU-hours: 0.00 setup, 0.05 load, 0.13 tasks (0.07 last task alone), 0.01 "
        "teardown; 1 job(s) of 1 model(s)")


def _ended(run_dir: Path, model: str, task: str, job: str, when: float) -> None:
    """The task's manifest says which job finished it, and when (the ledger's tail)."""
    from datetime import datetime, timezone

    finish_task(run_dir, model, task)
    path = Path(model_dir(run_dir, model)) / "tasks" / task / MANIFEST_FILE
    record = json.loads(path.read_text())
    record.update(finished_at=datetime.fromtimestamp(when, tz=timezone.utc).isoformat(),
                  slurm={"job_id": job})
    path.write_text(json.dumps(record))


@pytest.fixture
def run(tmp_path: Path, fake: FakeSlurm) -> Path:
    """One model, both tasks done by its job (queued 30 s, then FULL on 4 GPUs: setup 3 s,
    load 47 s, tasks 120 s, the last 60 s of them one task alone, teardown 10 s)."""
    result = submit_configs(configs(tmp_path), fake)
    entry = read_jobs(result.run_dir).chain[0]
    t0 = entry.submitted_at + 30
    _ended(result.run_dir, "solo", ONE, entry.id, t0 + 100)
    _ended(result.run_dir, "solo", TWO, entry.id, t0 + 160)
    (Path(model_dir(result.run_dir, "solo")) / LEDGER_FILE).write_text(
        ledger_marks(*FULL, job=entry.id, t0=t0))
    return result.run_dir


def _rows(run: Path, *more: str) -> dict[str, Any]:
    out = CliRunner().invoke(cli, ["results", str(run), "--json", *more])
    assert out.exit_code == 0, out.output
    return {r["task"]: r for r in json.loads(out.output)}


def _section(page: str) -> str:
    section = page[page.index('<section id="ledger">'):]
    return section[:section.index("</section>")]


def test_results_json_carries_the_model_s_ledger_on_each_row(run: Path, tmp_path: Path) -> None:
    rows = _rows(run)
    assert rows[ONE]["ledger"] == rows[TWO]["ledger"]
    ledger = rows[ONE]["ledger"]
    (job,) = ledger["jobs"]
    assert job["seconds"] == {"setup": 3.0, "load": 47.0, "tasks": 120.0, "teardown": 10.0}
    assert (job["queued_s"], job["tail_s"], job["gpus"], job["phase"]) == (30.0, 60.0, 4, None)
    assert (ledger["left_out"], ledger["unknown"]) == (0, None)
    total = ledger["total"]
    assert total["gpu_seconds"] == {"setup": 12.0, "load": 188.0, "tasks": 480.0,
                                    "teardown": 40.0}
    assert (total["gpu_hours"], total["tail_gpu_seconds"], total["jobs"]) == (0.2, 240.0, 1)
    table = parquet_table(run, tmp_path)
    assert json.loads(table["ledger"].iloc[0])["total"]["gpu_hours"] == 0.2


def test_info_adds_the_run_s_sums(run: Path) -> None:
    out = CliRunner().invoke(cli, ["info", str(run)])
    assert out.exit_code == 0, out.output
    assert f"ledger     run total: {LINE}\n" in out.output
    as_json = json.loads(CliRunner().invoke(cli, ["info", str(run), "--json"]).output)
    assert as_json["ledger"]["solo"]["total"]["gpu_hours"] == 0.2
    assert as_json["ledger"]["solo"]["jobs"][0]["queued_s"] == 30.0


def test_the_report_draws_each_job_s_phases_and_the_run_s_sums(run: Path) -> None:
    section = _section(html_report(results_frame([run]), run_dirs=[run]))
    assert f"{LINE}</p>" in section  # the run's line, and the model's (one model: the same)
    assert section.count(LINE) == 2 and "<h3>solo · " in section
    (chart,) = re.findall(r'<svg [^>]*class="chart stacked".*?</svg>', section, re.S)
    segments = re.findall(r'data-part="([^"]*)" x="[^"]*" y="[^"]*" width="([^"]*)"', chart)
    # the longest job fills the 420 px plot: 180 s
    assert segments == [("setup", "7.0"), ("load", "109.7"), ("tasks", "140.0"),
                        ("last task alone", "140.0"), ("teardown", "23.3")]
    titles = re.findall(r"<title>([^<]*)</title></rect>", chart)
    assert titles == ["setup 3 s (12 GPU-seconds)", "load 47 s (188 GPU-seconds)",
                      "tasks 120 s (480 GPU-seconds), the last 60 s of it one task alone",
                      "last task alone 60 s (240 GPU-seconds)",
                      "teardown 10 s (40 GPU-seconds)"]
    assert "3 min on 4 GPU(s)" in chart and "<script" not in section
    assert 'href="#ledger"' in html_report(results_frame([run]), run_dirs=[run])


def test_a_sweep_sums_every_model_and_draws_the_table_s(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    t0 = read_jobs(result.run_dir).chain[0].submitted_at
    for i, key in enumerate(("model-00", "model-01")):
        finish_task(result.run_dir, key, ONE)
        (Path(model_dir(result.run_dir, key)) / LEDGER_FILE).write_text(
            ledger_marks(*FULL, job=f"<b>{i}", t0=t0))
    frame = results_frame([result.run_dir], models=["model-00"])
    section = _section(html_report(frame, run_dirs=[result.run_dir]))
    assert "of 0.40 GPU-hours: " in section and "; 2 job(s) of 2 model(s)" in section
    assert section.count('<div class="ledger"') == 1 and 'data-model="model-00"' in section
    assert "job &lt;b&gt;0" in section and "<b>0" not in section  # a planted id is escaped


def test_a_sweep_judges_job_is_in_the_ledger_with_its_wait_for_the_array(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """A sweep's judge runs first and its GPUs wait while the array queues (docs/judge-sweep.md,
    hpc-admin-2 D1): info shows its job beside the models' (its tasks phase is the time it
    served), how long it waited for the first model's job, and counts its GPU-hours in the
    run's total. Its job writes the same marks into auxiliary/judge/ledger."""
    result, array, _, judge = submitted(tmp_path, fake)
    t0 = read_jobs(result.run_dir).chain[0].submitted_at + 5  # the judge: queued 5 s
    Path(aux_dir(result.run_dir, "judge"), LEDGER_FILE).write_text(ledger_marks(
        (0, "start"), (2, "launched"), (60, "ready"), (900, "teardown"), (902, "end"),
        job=judge, gpus="2", t0=t0))
    # the elements leave the queue 10 minutes after the judge was ready; one before the judge
    # started (a successor of an earlier judge served it) does not count
    for i, (key, start) in enumerate((("model-00", 660.0), ("model-01", 700.0),
                                      ("model-02", -50.0))):
        marks = ledger_marks((0, "start"), (1, "launched"), (10, "ready"), (20, "tasks_done"),
                             (21, "end"), job=f"{array}_{i}", gpus="1", t0=t0 + start)
        (Path(model_dir(result.run_dir, key)) / LEDGER_FILE).write_text(marks)
    out = CliRunner().invoke(cli, ["info", str(result.run_dir)])
    assert out.exit_code == 0, out.output
    assert (f"ledger     auxiliary/judge job {judge}: 902 s on 2 GPU(s): setup 2 s, load 58 s, "
            "tasks 840 s (waited for the first model's job 600 s), teardown 2 s") in out.output
    assert "; 3 job(s) of 3 model(s) and 1 judge job(s)" in out.output, out.output
    as_json = json.loads(CliRunner().invoke(cli, ["info", str(result.run_dir), "--json"]).output)
    found = as_json["judge_ledger"]["auxiliary/judge"]
    (job,) = found["jobs"]
    assert (job["waited_s"], job["queued_s"], job["gpus"]) == (600.0, 5.0, 2)
    assert (found["total"]["models"], found["total"]["judge_jobs"]) == (0, 1)
    assert found["total"]["gpu_seconds"]["tasks"] == 1680.0
    assert all(j["waited_s"] is None for key in as_json["ledger"]
               for j in as_json["ledger"][key]["jobs"])  # a model's job waits for no one


def test_a_sweep_element_is_queued_from_its_array_s_submission(tmp_path: Path,
                                                               fake: FakeSlurm) -> None:
    """jobs.json holds an element as <array>_<index>; its job writes its own id on each
    line, and that element id once (preamble.j2), by which its queue is found."""
    result = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    entry = read_jobs(result.run_dir).chain[0]
    t0 = entry.submitted_at + 30
    for i, key in enumerate(("model-00", "model-01")):
        finish_task(result.run_dir, key, ONE)
        marks = ledger_marks(*FULL, job=f"90{i}", t0=t0).splitlines()
        if i == 0:  # model-01's job is older than the element mark: its queue stays unknown
            marks.insert(1, f"90{i} {t0 + 0.1} element {entry.scheduler_id(i)}")
        (Path(model_dir(result.run_dir, key)) / LEDGER_FILE).write_text("\n".join(marks) + "\n")
    out = CliRunner().invoke(cli, ["results", str(result.run_dir), "--json"])
    assert out.exit_code == 0, out.output
    queued = {r["model"]: r["ledger"]["jobs"][0]["queued_s"] for r in json.loads(out.output)}
    assert queued == {"model-00": 30.0, "model-01": None}


def test_many_jobs_list_and_draw_the_newest(run: Path) -> None:
    path = Path(model_dir(run, "solo")) / LEDGER_FILE
    path.write_text("".join(ledger_marks((0, "start"), (5, "end"), job=str(900 + i),
                                         t0=1_765_000_000.0 + 10 * i)
                            for i in range(JOBS_LISTED + 10)))
    ledger = _rows(run)[ONE]["ledger"]
    assert len(ledger["jobs"]) == JOBS_LISTED and ledger["left_out"] == 10
    assert ledger["total"]["jobs"] == JOBS_LISTED + 10 and ledger["jobs"][-1]["job_id"] == "959"
    section = _section(html_report(results_frame([run]), run_dirs=[run]))
    assert f"The newest {JOBS_LISTED} jobs; 10 earlier ones" in section
    assert section.count('data-part="setup"') == JOBS_LISTED


def test_a_ledger_that_is_not_the_users_is_unknown_everywhere(
        run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path(model_dir(run, "solo")) / LEDGER_FILE
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        monkeypatch.setattr("hpceval.trust.my_uids", lambda: frozenset({path.stat().st_uid + 1}))
    assert _rows(run)[ONE]["ledger"]["unknown"].startswith("ledger is owned by")
    section = _section(html_report(results_frame([run]), run_dirs=[run]))
    assert "no ledger (1 unknown)" in section
    assert '<span class="flag">ledger unknown: ledger is owned by' in section
    assert "<svg" not in section


def test_a_damaged_ledger_shows_less_and_none_says_so(run: Path) -> None:
    path = Path(model_dir(run, "solo")) / LEDGER_FILE
    path.write_bytes(b"\x00\xff\n" + path.read_bytes()[:-40] + b"\n42 x start 4\n")
    (job,) = _rows(run)[ONE]["ledger"]["jobs"]
    assert job["phase"] == "teardown"  # its end mark was cut off: counted until now
    assert "without an end mark" in _section(html_report(results_frame([run]), run_dirs=[run]))
    path.unlink()
    assert _rows(run)[ONE]["ledger"] is None
    section = _section(html_report(results_frame([run]), run_dirs=[run]))
    assert "No ledger for these runs" in section
    out = CliRunner().invoke(cli, ["info", str(run), "--json"])
    assert json.loads(out.output)["ledger"] == {"solo": None}
