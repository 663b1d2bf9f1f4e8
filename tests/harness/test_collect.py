"""`python -m hpceval.job collect` on prepared harness output (fast; no harness runs here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import hpceval
from hpceval.contract import FAILED_FILE
from hpceval.job.collect import main
from hpceval.tasks.result import TaskResult

DATA = Path(__file__).parent / "data" / "eval_factory"
LM_EVAL_RESULTS = {
    "results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25,
                          "exact_match_stderr,strict-match": 0.1,
                          "exact_match,flexible-extract": 0.5,
                          "exact_match_stderr,flexible-extract": 0.11}},
    "n-samples": {"gsm8k": {"original": 1319, "effective": 20}},
    "lm_eval_version": "0.4.13",
}


def task_dir(tmp_path: Path, name: str = "lm-eval-upstream.gsm8k") -> Path:
    """<run>/models/<model>/tasks/<task>, as the job script lays it out."""
    run = tmp_path / "run"
    path = run / "models" / "m" / "tasks" / name
    (path / "harness").mkdir(parents=True)
    (run / "run.yaml").write_text("evaluation: {tasks: [{name: gsm8k}]}\n")
    (path / "command.sh").write_text("harness_1 () { lm_eval ...; }\n")
    os.utime(path / "command.sh", (1_700_000_000, 1_700_000_000))
    (path / "harness.log").write_text("".join(f"line {i}\n" for i in range(100)))
    return path


def lm_eval_output(path: Path) -> None:
    out = path / "harness" / "oracle"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results_2026-11-30T00-00-00.json").write_text(json.dumps(LM_EVAL_RESULTS))


def snapshot(path: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*")) if p.is_file()}


def collect(path: Path, exit_code: int = 0, *extra: str) -> int:
    return main(["--task-dir", str(path), "--exit-code", str(exit_code), *extra])


def test_success_writes_results_manifest_then_done(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # the backend's env.j2 exports these (hpceval.jobenv); Slurm's own names are not read
    monkeypatch.setenv("HPCEVAL_JOB_ID", "4242")
    monkeypatch.setenv("HPCEVAL_NODELIST", "gpu[01-02]")
    monkeypatch.setenv("HPCEVAL_RESTART_COUNT", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "other")
    monkeypatch.setenv("HPCEVAL_MODEL_ID", "served-name")
    monkeypatch.setenv("HPCEVAL_ENDPOINT_URL", "http://user:secret@node01:8000/v1/completions")
    path = task_dir(tmp_path)
    lm_eval_output(path)
    assert collect(path) == 0
    assert {p.name for p in path.iterdir()} >= {"results.json", "manifest.json", "done"}
    assert not (path / FAILED_FILE).exists()
    # done is written last: nothing in the task dir is newer than it
    done_ns = (path / "done").stat().st_mtime_ns
    assert all(p.stat().st_mtime_ns <= done_ns for p in path.iterdir() if p.is_file())

    result = TaskResult.from_json((path / "results.json").read_text())
    assert result.task == "lm-eval-upstream.gsm8k"
    assert result.harness == "lm-eval-upstream"  # the catalogue harness, not the format
    assert result.extra["format"] == "lm-evaluation-harness"
    assert result.value("exact_match", filter="flexible-extract") == 0.5

    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["hpceval_version"] == hpceval.__version__
    assert manifest["task"]["qualified_name"] == "lm-eval-upstream.gsm8k"
    assert manifest["task"]["resolved"] is True
    assert manifest["harness"] == {
        "name": "lm-eval-upstream", "parser": "lm_eval", "version": "0.4.13",
        "runtime": "host", "image": None, "sif": None,
        "pip_package": "lm-eval[api]==0.4.13", "source": manifest["harness"]["source"]}
    assert manifest["image"] is None
    assert manifest["exit_code"] == 0
    assert manifest["started_at"] == "2023-11-14T22:13:20+00:00"  # command.sh's mtime
    assert manifest["finished_at"] >= manifest["started_at"]
    assert manifest["slurm"] == {"job_id": "4242", "node_list": "gpu[01-02]",
                                 "restart_count": "1"}
    assert manifest["job"]["model_id"] == "served-name"
    assert manifest["job"]["endpoint_url"] == "http://node01:8000/v1/completions"
    assert manifest["run_config"]["path"].endswith("run/run.yaml")
    assert len(manifest["command"]["sha256"]) == 64
    assert manifest["results"]["metrics"] == 2
    assert manifest["previous_failure"] is None


def test_an_array_element_records_its_array_and_place(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An array element's facts under the manifest's field names (cost accounting asks the
    scheduler for "<array_job_id>_<array_task_id>"); a restart count of 0 is left out, as
    Slurm leaves its variable unset for a job never requeued."""
    for name, value in {"HPCEVAL_JOB_ID": "17", "HPCEVAL_NODELIST": "n1",
                        "HPCEVAL_ARRAY_JOB_ID": "16", "HPCEVAL_ARRAY_INDEX": "1",
                        "HPCEVAL_RESTART_COUNT": "0", "HPCEVAL_CLUSTER": "dev",
                        "HPCEVAL_PARTITION": "gpu"}.items():
        monkeypatch.setenv(name, value)
    path = task_dir(tmp_path)
    lm_eval_output(path)
    assert collect(path) == 0
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["slurm"] == {"job_id": "17", "node_list": "n1", "array_job_id": "16",
                                 "array_task_id": "1", "cluster_name": "dev",
                                 "job_partition": "gpu"}


def test_options_win_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCEVAL_JOB_ID", "1")
    path = task_dir(tmp_path)
    lm_eval_output(path)
    assert collect(path, 0, "--job-id", "77", "--node-list", "n[1-4]",
                   "--started-at", "2026-11-30T10:00:00Z") == 0
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["slurm"] == {"job_id": "77", "node_list": "n[1-4]"}
    assert manifest["started_at"] == "2026-11-30T10:00:00+00:00"


def test_container_harness_records_its_image(tmp_path: Path) -> None:
    path = task_dir(tmp_path, "simple_evals.gpqa_diamond")
    shutil.copy(DATA / "simple_evals_gpqa" / "results.yml", path / "harness" / "results.yml")
    assert collect(path) == 0
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["image"] == "nvcr.io/nvidia/eval-factory/simple-evals:26.03"
    assert manifest["sif"] == "eval-factory_simple-evals_26.03.sif"
    assert manifest["harness"]["parser"] == "eval_factory"
    result = TaskResult.from_json((path / "results.json").read_text())
    assert result.harness == "simple_evals"
    assert result.value("score", filter="micro") == 0.46


def test_a_done_task_is_never_touched(tmp_path: Path) -> None:
    path = task_dir(tmp_path)
    lm_eval_output(path)
    assert collect(path) == 0
    before = snapshot(path)
    # a later attempt failing, or producing other numbers, changes nothing
    assert collect(path, 1) == 0
    newer = {**LM_EVAL_RESULTS, "lm_eval_version": "9.9"}
    (path / "harness" / "oracle" / "results_2099-01-01T00-00-00.json").write_text(
        json.dumps(newer))
    before = {**before, **{k: v for k, v in snapshot(path).items() if k.startswith("harness")}}
    assert collect(path, 0) == 0
    assert collect(path, 124) == 0
    assert snapshot(path) == before
    assert not (path / FAILED_FILE).exists()


def test_harness_failure_writes_failed_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    path = task_dir(tmp_path)
    assert collect(path, 3) == 1
    failed = json.loads((path / FAILED_FILE).read_text())
    assert failed["stage"] == "harness"
    # the reason says where the harness's own log is: status shows it as is
    assert failed["reason"] == f"harness exited with status 3 (log: {path / 'harness.log'})"
    assert failed["exit_code"] == 3
    assert failed["attempts"] == 1
    assert failed["task"] == "lm-eval-upstream.gsm8k"
    assert failed["log_tail"][-1] == "line 99" and len(failed["log_tail"]) == 40
    assert not (path / "results.json").exists() and not (path / "done").exists()
    assert "FAILED (harness)" in capsys.readouterr().out
    # the next attempt times out: counted, and said so, with the task's timeout
    assert collect(path, 124, "--timeout", "30") == 1
    failed = json.loads((path / FAILED_FILE).read_text())
    assert failed["attempts"] == 2
    assert failed["reason"].startswith("harness timed out after 30 s"), failed["reason"]


@pytest.mark.parametrize("code, extra, reason", [
    (124, ("--timeout", "5"), "harness timed out after 5 s (stopped with SIGTERM)"),
    (137, ("--timeout", "5"), "harness killed with SIGKILL: it outlived its 5 s timeout by the "
                              "grace period, or ran out of memory"),
    (124, (), "harness exited with status 124: timed out (timeout sent SIGTERM)"),
    (124, ("--timeout", "0"), "harness exited with status 124"),  # no timeout: its own status
    (137, (), "harness exited with status 137: killed (SIGKILL, timeout or OOM)"),
])
def test_timeout_reasons(tmp_path: Path, code: int, extra: tuple[str, ...], reason: str) -> None:
    path = task_dir(tmp_path)
    assert collect(path, code, *extra) == 1
    failed = json.loads((path / FAILED_FILE).read_text())
    assert failed["reason"] == f"{reason} (log: {path / 'harness.log'})"


def test_success_after_failure_keeps_the_failure_in_the_manifest(tmp_path: Path) -> None:
    path = task_dir(tmp_path)
    assert collect(path, 1) == 1
    lm_eval_output(path)
    assert collect(path, 0) == 0
    assert not (path / FAILED_FILE).exists()
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["previous_failure"]["reason"].startswith("harness exited with status 1 ")


@pytest.mark.parametrize("setup, reason", [
    (lambda p: None, "NoResultsFound: no lm-eval results_*.json"),
    (lambda p: (p / "harness" / "results_x.json").write_text("{not json"), "JSONDecodeError"),
    (lambda p: (p / "harness" / "results_x.json").write_text('{"results": {"t": {}}}'),
     "holds no metrics"),
    # shared-cluster-4 N8: no score is NaN or Infinity
    (lambda p: (p / "harness" / "results_x.json").write_text(
        '{"results": {"t": {"acc,none": NaN, "f1,none": Infinity}}}'),
     "holds no finite metrics (NaN or Infinity: t/acc, t/f1)"),
    # a results file is a summary: one past the bound is refused, not read whole
    (lambda p: (p / "harness" / "results_x.json").write_bytes(
        b'{"results": {"t": {"acc,none": 0.5}}, "pad": "' + b"x" * (32 << 20) + b'"}'),
     "results_x.json is larger than 32 MiB"),
])
def test_parse_failure_writes_failed_json(tmp_path: Path, setup: Callable[[Path], Any],
                                         reason: str) -> None:
    path = task_dir(tmp_path)
    setup(path)
    assert collect(path, 0) == 1
    failed = json.loads((path / FAILED_FILE).read_text())
    assert failed["stage"] == "parse"
    assert reason in failed["reason"]
    assert not (path / "done").exists()


def test_non_finite_metrics_are_left_out_and_named_the_rest_is_stored_as_strict_json(
        tmp_path: Path) -> None:
    path = task_dir(tmp_path)
    out = path / "harness" / "oracle"
    out.mkdir(parents=True)
    (out / "results_2026-11-30T00-00-00.json").write_text(
        '{"results": {"gsm8k": {"exact_match,strict-match": 0.25, "exact_match_stderr,'
        'strict-match": NaN, "f1,none": NaN}}, "lm_eval_version": "0.4.13"}')
    assert collect(path, 0) == 0
    text = (path / "results.json").read_text()
    stored = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name} stored"))
    assert [(m["name"], m["value"], m["stderr"]) for m in stored["metrics"]] == [
        ("exact_match", 0.25, None)]
    assert stored["extra"]["non_finite"] == ["gsm8k/f1"]


def test_task_names_the_directory_does_not(tmp_path: Path) -> None:
    path = task_dir(tmp_path, "lm-eval-upstream.gsm8k-2")  # the second of two gsm8k entries
    lm_eval_output(path)
    assert collect(path) == 0
    assert json.loads((path / "manifest.json").read_text())["task"]["name"] == "gsm8k"

    other = task_dir(tmp_path / "b", "renamed")
    lm_eval_output(other)
    assert collect(other) == 1
    failed = json.loads((other / FAILED_FILE).read_text())
    assert failed["stage"] == "resolve" and "unknown task 'renamed'" in failed["reason"]
    assert collect(other, 0, "--task", "lm-eval-upstream.gsm8k") == 0


def test_unlisted_task_with_explicit_parser(tmp_path: Path) -> None:
    path = task_dir(tmp_path, "not-in-any-catalogue")
    lm_eval_output(path)
    assert collect(path, 0, "--parser", "lm_eval", "--harness", "my-lm-eval") == 0
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["task"] == {"qualified_name": "not-in-any-catalogue", "resolved": False}
    assert manifest["harness"]["name"] == "my-lm-eval"
    assert TaskResult.from_json((path / "results.json").read_text()).harness == "my-lm-eval"


def test_missing_task_dir_is_a_usage_error(tmp_path: Path) -> None:
    assert collect(tmp_path / "nope") == 2
    assert not (tmp_path / "nope").exists()


def run_module(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpceval.job", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120, check=False)


def test_module_entry_point_dispatches(tmp_path: Path) -> None:
    path = task_dir(tmp_path)
    lm_eval_output(path)
    done = run_module("collect", "--task-dir", str(path), "--exit-code", "0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "collect: task lm-eval-upstream.gsm8k done, 2 metrics" in done.stdout
    again = run_module("collect", "--task-dir", str(path), "--exit-code", "0", cwd=tmp_path)
    assert again.returncode == 0 and "already done" in again.stdout

    assert run_module(cwd=tmp_path).returncode == 2
    unknown = run_module("frobnicate", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown command" in unknown.stderr
    helped = run_module("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "collect" in helped.stdout
    proxy = run_module("proxy", "--help", cwd=tmp_path)
    assert proxy.returncode == 0 and "--upstream" in proxy.stdout
    usage = run_module("collect", "--task-dir", str(path), cwd=tmp_path)
    assert usage.returncode == 2 and "--exit-code" in usage.stderr


def _no_space_for(name: str) -> Callable[..., None]:
    """os.replace that fails as a full disk would for files called `name` (temp file kept)."""
    real = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == name:
            raise OSError(28, "No space left on device")
        real(src, dst)
    return replace


def test_a_full_disk_while_writing_results_records_why_and_leaves_nothing_half_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = task_dir(tmp_path)
    lm_eval_output(path)
    monkeypatch.setattr(os, "replace", _no_space_for("results.json"))
    assert collect(path, 0) == 1
    failed = json.loads((path / FAILED_FILE).read_text())
    assert failed["stage"] == "write"
    assert failed["reason"] == f"could not write results into {path}: No space left on device"
    assert not (path / "results.json").exists() and not (path / "done").exists()
    assert not list(path.glob(".*.tmp")), "a temporary file was left behind"


def test_failed_json_that_cannot_be_written_is_reported_not_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = task_dir(tmp_path)
    monkeypatch.setattr(os, "replace", _no_space_for(FAILED_FILE))
    assert collect(path, 3) == 1
    out = capsys.readouterr().out
    assert "harness exited with status 3" in out
    assert f"could not record {path / FAILED_FILE}: No space left on device" in out
    assert not (path / FAILED_FILE).exists()


def _runtime(path: Path, lost: int) -> None:
    from hpceval.results.runtime import TaskStats, write_runtime

    stats = TaskStats()
    for _ in range(3):
        stats.record(200, 0.1, False, None)
    for _ in range(lost):
        stats.record(502, 0.1, False, None, infra="502 connection failed or lost")
    write_runtime(path, stats.to_json())


def test_infrastructure_failures_beyond_the_allowance_fail_the_task_unscored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = task_dir(tmp_path)
    lm_eval_output(path)  # the harness scored the failed requests: a lowered score
    _runtime(path, lost=2)
    assert collect(path) == 1
    assert not (path / "results.json").exists() and not (path / "done").exists()
    failed = json.loads((path / FAILED_FILE).read_text())
    assert failed["stage"] == "infrastructure"
    assert failed["reason"].startswith("2 request(s) failed on the infrastructure after the "
                                       "in-job proxy's retries (502 connection failed or lost: 2)")
    assert "infra_errors_allowed" in failed["reason"] and "resume" in failed["reason"]
    assert "FAILED (infrastructure)" in capsys.readouterr().out
    # allowed: scored, and the flag says how many
    assert collect(path, 0, "--infra-errors-allowed", "2") == 0
    from hpceval.results.flags import finished_task_flags

    assert [f.code for f in finished_task_flags(str(path))] == ["infra-errors"]


def test_a_failed_harness_names_the_infrastructure_failures_it_was_sent(tmp_path: Path) -> None:
    path = task_dir(tmp_path)
    _runtime(path, lost=1)
    assert collect(path, 1) == 1
    failed = json.loads((path / FAILED_FILE).read_text())
    assert failed["stage"] == "harness"
    assert failed["reason"].endswith("; 1 request(s) failed on the infrastructure after the "
                                     "in-job proxy's retries (502 connection failed or lost: 1)")


def test_no_infrastructure_failure_no_change(tmp_path: Path) -> None:
    path = task_dir(tmp_path)
    lm_eval_output(path)
    _runtime(path, lost=0)
    assert collect(path) == 0 and (path / "done").exists()


def test_an_earlier_jobs_runtime_json_fails_no_resumed_task(tmp_path: Path) -> None:
    """A resumed task's harness can end before its job's proxy first writes runtime.json: the
    file then is the earlier job's, with what that job lost, older than this harness's start
    (command.sh). It counts nothing here (the proxy writes a failure before it sends it)."""
    path = task_dir(tmp_path)
    lm_eval_output(path)
    _runtime(path, lost=2)
    before_start = 1_600_000_000  # task_dir's command.sh: 1_700_000_000
    os.utime(path / "runtime.json", (before_start, before_start))
    assert collect(path) == 0 and (path / "done").exists()
