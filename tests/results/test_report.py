"""The HTML report: what was run, comparison with intervals, cost, per-sample answers."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.reports import ONE, SCORES, TWO, finish, lm_eval_sample, write_samples
from support.runs import configs
from support.slurm import RecordedSlurm

from hpceval.cli.main import cli
from hpceval.results.report import html_report
from hpceval.results.report.samples import read_task_samples
from hpceval.results.table import results_frame
from hpceval.runs.submit import submit_configs


@pytest.fixture
def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake = RecordedSlurm()
    fake._ids = itertools.count(16)  # the array 16 of the recorded sacct sample
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    result = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    for (model, task), (value, stderr) in SCORES.items():
        index = model[-1]
        finish(result.run_dir, model, task, value, stderr, samples=50,
               job={"job_id": "99", "array_job_id": "16", "array_task_id": index})
    return result.run_dir


def test_report_answers_what_was_run_and_what_it_cost(sweep: Path, tmp_path: Path) -> None:
    page_file = tmp_path / "report.html"
    out = CliRunner().invoke(cli, ["results", str(sweep), "--html", str(page_file),
                                   "--samples", "5"])
    assert out.exit_code == 0, out.output
    page = page_file.read_text()
    assert "https://" not in page and "http://" not in page.replace("http://www.w3.org", "")
    run_yaml = (sweep / "run.yaml").read_text().splitlines()[0]
    assert run_yaml.split(":")[0] in page  # the resolved config is on the page
    assert "1 node(s) x 0 GPU(s): 1 instance(s) x 0 GPU(s), TP 1, PP 1" in page
    assert "sha256:" + "ab" * 32 in page and "ut-harness" in page
    assert "16_0" in page and "16_1" in page  # job ids
    assert "1m00s" in page  # wall time per task
    # cost from the recorded sacct sample: 16_0 and 16_1 held 1 GPU for 2 s each
    assert re.search(r"<td>model-00</td><td>\(all jobs\)</td><td>0\.000556</td>", page)


def test_comparison_is_paired_on_sample_files_and_says_when_it_falls_back(sweep: Path) -> None:
    # both models' sample files hold the same 50 answers: the paired test finds no difference
    page = html_report(results_frame([sweep]), run_dirs=[sweep])
    assert page.count("paired McNemar exact on 50 items: difference +0") == 2
    assert page.count("the difference may be noise") == 2
    assert page.count("(Wilson)") == 4 and page.count('<line class="ci"') == 4
    for path in sweep.rglob("samples_*.jsonl"):
        path.unlink()
    # without them: marginal numbers (0.80±0.02 vs 0.78±0.02; 0.90±0.01 vs 0.40±0.01)
    page = html_report(results_frame([sweep]), run_dirs=[sweep])
    assert page.count("no per-sample files on either side: marginal fallback") == 2
    assert "model-00 vs model-01: unpaired normal (harness stderr)" in page
    assert "model-01 vs model-00: unpaired normal" in page and "model-01 is ahead" in page
    assert page.count("the difference may be noise") == 1


def test_first_n_samples_and_first_n_wrong_ones(sweep: Path) -> None:
    task_dir = sweep / "models" / "model-00" / "tasks" / ONE
    found = read_task_samples(str(task_dir), 5)
    head = [s for s in found.samples if s.line <= 5]
    assert [s.doc_id for s in head] == [0, 1, 2, 3, 4]
    assert [s.doc_id for s in found.samples if s.wrong] == [0, 3, 6, 9, 12]  # every 3rd
    assert not found.complete and found.scanned == 13  # stopped once both were found
    first = found.samples[1]
    assert (first.prompt, first.answer, first.reference, first.score) == (
        "Question 1: what is 1+1?", "2", "2", 1.0)
    assert found.samples[0].answer == "0" and found.samples[3].answer == "9"


def test_samples_are_bounded_not_inlined(tmp_path: Path) -> None:
    task_dir = tmp_path / "t"
    write_samples(task_dir, "big", 20_000, wrong_every=1_000_000)  # only doc 0 wrong
    found = read_task_samples(str(task_dir), 10, scan_limit=500)
    assert found.scanned == 500 and len(found.samples) == 10 and not found.complete
    assert found.wrong_scanned == 1


def test_sample_text_is_escaped(tmp_path: Path) -> None:
    import json

    from hpceval.results.report.sections import samples_section

    task_dir = tmp_path / "t" / "harness"
    task_dir.mkdir(parents=True)
    (task_dir / "samples_x_1.jsonl").write_text(json.dumps(lm_eval_sample(
        1, False, prompt="<script>alert(1)</script>")) + "\n{not json\n")
    found = read_task_samples(str(tmp_path / "t"), 5)
    html = samples_section([("m", "x", found)], 5)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)" in html
    assert found.scanned == 2 and len(found.samples) == 1  # the cut line is skipped


def test_model_and_task_filters_narrow_the_samples(sweep: Path) -> None:
    frame = results_frame([sweep], models=["model-01"], tasks=["ut_two"])
    page = html_report(frame, run_dirs=[sweep])
    assert page.count('class="task-samples"') == 1
    assert f'data-model="model-01" data-task="{TWO}"' in page


def test_layout_of_runs_from_before_run_json_recorded_it(sweep: Path) -> None:
    import json

    import yaml

    from hpceval.results.report.runinfo import layout_text, read_run_info

    run = json.loads((sweep / "run.json").read_text())
    assert run["models"][0]["layout"]["instances"] == 1
    config = yaml.safe_load((sweep / "models" / "model-00" / "run.yaml").read_text())
    config["execution"]["gpus_per_node"] = 4  # 4 GPUs, 2 per instance: 2 (computed here)
    config["deployment"]["gpus_per_instance"] = 2
    assert layout_text(config, None) == (
        "1 node(s) x 4 GPU(s): 2 instance(s) x 2 GPU(s), TP 1, PP 1")
    for model in run["models"]:
        del model["layout"]
    (sweep / "run.json").write_text(json.dumps(run))
    info = read_run_info(sweep)
    assert info is not None
    assert info.models[0].layout == (
        "1 node(s) x 0 GPU(s): 1 instance(s) x 0 GPU(s), TP 1, PP 1")
