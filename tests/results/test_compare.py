"""`hpceval compare` and `gate`, the report's comparison, and which run counts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support.reports import ONE, TWO, lm_eval_sample
from support.runs import configs
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.results.report import html_report
from hpceval.results.store import finalize_task
from hpceval.results.table import leaderboard, results_frame
from hpceval.runs.submit import submit_configs
from hpceval.tasks.result import Metric, TaskResult


def scored(run_dir: Path, model: str, task: str, right: list[bool]) -> Path:
    """A finished task whose lm-eval sample file holds these answers (doc_id = index)."""
    task_dir = run_dir / "models" / model / "tasks" / task
    folder = task_dir / "harness" / "m"
    folder.mkdir(parents=True, exist_ok=True)
    short = task.split(".")[-1]
    with (folder / f"samples_{short}_2026-12-01T10-00-00.jsonl").open("w") as handle:
        for i, ok in enumerate(right):
            handle.write(json.dumps(lm_eval_sample(i, ok)) + "\n")
    value = sum(right) / len(right)
    stderr = (value * (1 - value) / max(1, len(right) - 1)) ** 0.5
    finalize_task(task_dir, TaskResult(task, "ut-harness", "1.0", [
        Metric(short, "exact_match", value, stderr, "strict-match", len(right))]).to_json(),
        {"duration_s": 1.0})
    return task_dir


def submit(tmp_path: Path, n_models: int, name: str = "run") -> Path:
    return submit_configs(configs(tmp_path, n_models, name=name), FakeSlurm(),
                          aggregate=False).run_dir


# A fixes nothing B breaks; B fixes 9 of the items A got wrong: McNemar p = 2/512
BASE = [i % 2 == 0 for i in range(60)]
FIXED = [ok or i < 18 for i, ok in enumerate(BASE)]


@pytest.fixture
def two_models(tmp_path: Path) -> Path:
    run_dir = submit(tmp_path, 2)
    scored(run_dir, "model-00", ONE, BASE)
    scored(run_dir, "model-01", ONE, FIXED)
    scored(run_dir, "model-00", TWO, BASE)
    scored(run_dir, "model-01", TWO, BASE[:50])  # 10 items only A answered
    return run_dir


def test_compare_models_of_one_run_is_paired(two_models: Path) -> None:
    run = str(two_models)
    out = CliRunner().invoke(cli, ["compare", f"{run}:model-00", f"{run}:model-01", "--json"])
    assert out.exit_code == 0, out.output
    data = {t["task"]: t for t in json.loads(out.output)["tasks"]}
    one, two = data[ONE], data[TWO]
    assert one["test"] == "McNemar exact" and one["paired"]["discordant"] == [0, 9]
    assert one["p_value"] == pytest.approx(2 / 512)
    assert one["p_adjusted"] == pytest.approx(2 * 2 / 512)  # Holm over 2 tasks, smallest first
    assert one["verdict"] == "B better" and one["interval"]["low"] > 0
    assert two["paired"]["only_a"] == 10 and two["paired"]["only_b"] == 0
    assert "10 by A only" in two["note"] and two["verdict"] == "no significant difference"
    assert one["a"]["interval"]["method"] == "Wilson"
    text = CliRunner().invoke(cli, ["compare", f"{run}:model-00", f"{run}:model-01"])
    assert text.exit_code == 0, text.output
    assert "McNemar exact" in text.output and "Newcombe paired Wilson" in text.output


def test_compare_refuses_a_run_of_several_models_without_a_model(two_models: Path) -> None:
    out = CliRunner().invoke(cli, ["compare", str(two_models), f"{two_models}:model-01"])
    assert out.exit_code == 2 and "name one as RUN:MODEL" in out.output


def test_marginal_fallback_says_so(two_models: Path) -> None:
    for path in (two_models / "models" / "model-01" / "tasks" / ONE / "harness").rglob("*"):
        if path.is_file():
            path.unlink()
    run = str(two_models)
    out = CliRunner().invoke(cli, ["compare", f"{run}:model-00", f"{run}:model-01", "--json",
                                   "--task", "ut_one"])
    [one] = json.loads(out.output)["tasks"]
    assert one["paired"] is None and "marginal fallback" in one["note"]
    assert one["test"] == "unpaired normal (harness stderr)"


def policy(tmp_path: Path, **rule: object) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(rule))
    return path


def test_gate_exit_codes(two_models: Path, tmp_path: Path) -> None:
    a, b = f"{two_models}:model-00", f"{two_models}:model-01"
    go = CliRunner().invoke(cli, ["gate", "--policy", str(policy(tmp_path, max_drop=0.5)), a, b,
                                  "--task", "ut_one"])
    assert go.exit_code == 0 and "gate: GO" in go.output, go.output
    # B must gain 0.5 on ut_one: its gain (0.15, interval entirely below 0.5) is a NO-GO
    nogo = CliRunner().invoke(cli, ["gate", "--policy", str(policy(tmp_path, min_gain=0.5)),
                                    a, b, "--task", "ut_one"])
    assert nogo.exit_code == 1 and "beyond the required gain" in nogo.output, nogo.output
    # no drop allowed at all on ut_two (same answers on 50 items): cannot be shown -> 3
    unsure = CliRunner().invoke(cli, ["gate", "--policy", str(policy(tmp_path, max_drop=0.0)),
                                      a, b, "--task", "ut_two", "--json"])
    assert unsure.exit_code == 3, unsure.output
    decision = json.loads(unsure.output)
    assert decision["decision"] == "INCONCLUSIVE" and "straddles" in decision["tasks"][0]["reason"]


def test_gate_policy_errors_name_the_key(two_models: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: {gsm8k: {max_dorp: 0.1}}\n")
    out = CliRunner().invoke(cli, ["gate", "--policy", str(bad), f"{two_models}:model-00",
                                   f"{two_models}:model-01"])
    assert out.exit_code == 2 and "policy.tasks.gsm8k.max_dorp" in out.output


def test_gate_is_no_go_when_b_is_flagged(two_models: Path, tmp_path: Path) -> None:
    broken = submit(tmp_path / "broken", 1)
    scored(broken, "solo", ONE, [False] * 60)  # every sample 0: a broken scorer
    out = CliRunner().invoke(cli, ["gate", "--policy", str(policy(tmp_path, max_drop=1.0)),
                                   f"{two_models}:model-00", str(broken), "--task", "ut_one"])
    assert out.exit_code == 1 and "all-zero" in out.output, out.output


def lm_eval_sizes(task_dir: Path, sizes: dict[str, int]) -> None:
    """lm-eval's own results file beside the sample files: its n-samples give each subtask's
    size (what the count flag compares the scored items with)."""
    (task_dir / "harness" / "m" / "results_2026-12-01T10-00-00.json").write_text(json.dumps(
        {"results": {}, "n-samples": {s: {"original": n, "effective": n}
                                      for s, n in sizes.items()}}))


def test_gate_leaves_a_candidate_with_lost_items_inconclusive(two_models: Path,
                                                              tmp_path: Path) -> None:
    """B scored 50 of ut_one's 60 items: its gain on those cannot make a GO (exit 3, not 1 as
    when every flag was a NO-GO); each flag's action is in the output; a policy that lets
    `count` warn gives the interval's GO."""
    short = submit(tmp_path / "short", 1)
    lm_eval_sizes(scored(short, "solo", ONE, FIXED[:50]), {"ut_one": 60})
    a = f"{two_models}:model-00"
    code, verdict = _gate(tmp_path, a, str(short), {"max_drop": 0.5}, "ut_one")
    [one] = verdict["tasks"]
    assert (code, one["decision"]) == (3, "INCONCLUSIVE"), one
    assert one["reason"].startswith("B is flagged count (inconclusive by the policy); B - A")
    assert one["flag_actions"] == [{
        "side": "B", "code": "count", "action": "inconclusive", "why": "by the policy",
        "message": "fewer items scored than the task has: ut_one: 50 of 60 (60 items)"}]
    text = CliRunner().invoke(cli, ["gate", "--policy", str(policy(tmp_path, max_drop=0.5)), a,
                                    str(short), "--task", "ut_one"])
    assert text.exit_code == 3 and "gate: INCONCLUSIVE" in text.output, text.output
    assert ("FLAG B: count: fewer items scored than the task has: ut_one: 50 of 60 (60 items)"
            " -> inconclusive (by the policy)") in text.output
    code, verdict = _gate(tmp_path, a, str(short), {"max_drop": 0.5, "flags": {"count": "warn"}},
                          "ut_one")
    assert (code, verdict["tasks"][0]["decision"]) == (0, "GO")
    assert verdict["tasks"][0]["flag_actions"][0]["action"] == "warn"


def test_gate_all_zero_on_both_sides_is_no_regression(tmp_path: Path) -> None:
    base, cand = submit(tmp_path / "a", 1, "base"), submit(tmp_path / "b", 1, "cand")
    scored(base, "solo", ONE, [False] * 60)
    scored(cand, "solo", ONE, [False] * 60)
    code, verdict = _gate(tmp_path, str(base), str(cand), {"max_drop": 0.5})
    [one] = verdict["tasks"]
    assert (code, one["decision"]) == (0, "GO"), one
    assert [(f["code"], f["action"], f["why"]) for f in one["flag_actions"]] == [
        ("all-zero", "warn", "A scores 0 on this task too: not a regression")]


def test_gate_policy_can_make_a_missing_task_inconclusive(two_models: Path,
                                                          tmp_path: Path) -> None:
    partial = submit(tmp_path / "partial", 1)
    scored(partial, "solo", ONE, FIXED)  # ut_two never finished
    code, verdict = _gate(tmp_path, f"{two_models}:model-00", str(partial),
                          {"max_drop": 0.5, "flags": {"missing": "inconclusive"}})
    tasks = {t["task"]: t for t in verdict["tasks"]}
    assert code == 3 and tasks[TWO]["decision"] == "INCONCLUSIVE"
    assert tasks[TWO]["reason"] == "finished in A, not in B (inconclusive by the policy)"
    assert tasks[TWO]["flag_actions"] == [{
        "side": "B", "code": "missing", "message": "finished in A, not in B",
        "action": "inconclusive", "why": "by the policy"}]


def test_the_newest_run_counts_everywhere(tmp_path: Path) -> None:
    """Two runs of one model: leaderboard, report, compare and gate use the newer, whatever
    order the runs are listed in; picking the oldest fails every assertion below."""
    base = submit(tmp_path / "b", 1, "base")  # the oldest: compare's baseline below
    scored(base, "solo", ONE, [True] * 30)
    old = submit(tmp_path, 1, "old")
    new = submit(tmp_path, 1, "new")
    scored(old, "solo", ONE, [True] * 30)
    scored(new, "solo", ONE, [True] * 10 + [False] * 20)
    for dirs in ([old, new], [new, old]):
        frame = results_frame(dirs)
        assert leaderboard(frame).loc["solo", ONE] == pytest.approx(1 / 3)
        page = html_report(frame, run_dirs=dirs)
        new_id = json.loads((new / "run.json").read_text())["invocation_id"]
        assert f"<td>solo</td><td>{new_id}</td><td>0.3333</td>" in page
    out = CliRunner().invoke(cli, ["compare", str(base), "solo", "--json", "--output-dir",
                                   str(tmp_path / "out")])
    assert out.exit_code == 0, out.output
    [one] = json.loads(out.output)["tasks"]
    assert one["b"]["value"] == pytest.approx(1 / 3) and one["b"]["run"] == new_id


def test_report_shows_corrected_intervals_and_paired_verdicts(two_models: Path) -> None:
    page = html_report(results_frame([two_models]), run_dirs=[two_models])
    assert "(Wilson)" in page and "± " not in page
    assert "paired McNemar exact on 60 items" in page
    assert "model-01 is ahead" in page


def test_unknown_side_is_a_clear_error(two_models: Path, tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["compare", f"{two_models}:model-00", "no-such-model",
                                   "--output-dir", str(tmp_path / "out")])
    assert out.exit_code == 2 and "'no-such-model' is no known run" in out.output
    out = CliRunner().invoke(cli, ["compare", f"{two_models}:model-00", f"{two_models}:nope"])
    assert out.exit_code == 2 and "no finished task of model 'nope'" in out.output


def test_gate_is_no_go_when_b_lacks_a_task(two_models: Path, tmp_path: Path) -> None:
    partial = submit(tmp_path / "partial", 1)
    scored(partial, "solo", ONE, FIXED)  # ut_two never finished
    out = CliRunner().invoke(cli, ["gate", "--policy", str(policy(tmp_path, max_drop=0.5)),
                                   f"{two_models}:model-00", str(partial), "--json"])
    assert out.exit_code == 1, out.output
    tasks = {t["task"]: t for t in json.loads(out.output)["tasks"]}
    assert tasks[ONE]["decision"] == "GO"
    assert tasks[TWO]["decision"] == "NO-GO" and tasks[TWO]["reason"] == "finished in A, not in B"


def _gate(tmp_path: Path, a: str, b: str, rules: dict[str, Any], *tasks: str
          ) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(rules))
    args = ["gate", "--policy", str(path), a, b, "--json"]
    for task in tasks:
        args += ["--task", task]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code in (0, 1, 3), out.output
    return out.exit_code, json.loads(out.output)


def test_gate_is_no_go_when_one_task_is_no_go_and_another_inconclusive(
        two_models: Path, tmp_path: Path) -> None:
    """The worst task decides: NO-GO outranks INCONCLUSIVE (exit 1, not 3), so a CI job that
    reruns inconclusive gates with more items does not retry a candidate it must reject."""
    code, verdict = _gate(tmp_path, f"{two_models}:model-00", f"{two_models}:model-01",
                          {"tasks": {ONE: {"min_gain": 0.5}, TWO: {"max_drop": 0.0}}})
    tasks = {t["task"]: t["decision"] for t in verdict["tasks"]}
    assert tasks == {ONE: "NO-GO", TWO: "INCONCLUSIVE"}
    assert verdict["decision"] == "NO-GO" and code == 1


def test_gate_divides_alpha_among_the_tasks_it_judges(two_models: Path, tmp_path: Path) -> None:
    """Bonferroni: gating two tasks at once judges each at alpha / 2, so its interval is wider
    than when it is gated alone; a gain threshold between the two lower ends is GO alone and
    INCONCLUSIVE beside a second task (without the division both read GO)."""
    a, b = f"{two_models}:model-00", f"{two_models}:model-01"
    lenient = {"min_gain": -1.0}
    _, alone = _gate(tmp_path, a, b, {"tasks": {ONE: lenient}}, ONE)
    _, beside = _gate(tmp_path, a, b, {"tasks": {ONE: lenient, TWO: lenient}})
    low_alone = alone["tasks"][0]["interval"]["low"]
    [one] = [t for t in beside["tasks"] if t["task"] == ONE]
    low_beside = one["interval"]["low"]
    assert low_beside < low_alone
    rules = {"tasks": {ONE: {"min_gain": (low_alone + low_beside) / 2}, TWO: lenient}}
    code, verdict = _gate(tmp_path, a, b, rules, ONE)
    assert (code, verdict["decision"]) == (0, "GO")
    code, verdict = _gate(tmp_path, a, b, rules)
    decisions = {t["task"]: t["decision"] for t in verdict["tasks"]}
    assert decisions == {ONE: "INCONCLUSIVE", TWO: "GO"} and code == 3


@pytest.mark.parametrize("missing_in", ["a", "b"])
def test_a_task_finished_on_one_side_only_is_judged_and_the_others_still_are(
        two_models: Path, tmp_path: Path, missing_in: str) -> None:
    """The first task (ut_one) finished in one run only: in B only it is INCONCLUSIVE (no
    baseline), in A only NO-GO; either way it carries the side's score, and the next task is
    still judged."""
    partial = submit(tmp_path / "partial", 1)
    scored(partial, "solo", TWO, BASE)  # ut_one never finished
    full = f"{two_models}:model-00"
    a, b = (str(partial), full) if missing_in == "a" else (full, str(partial))
    code, verdict = _gate(tmp_path, a, b, {"max_drop": 0.5})
    tasks = {t["task"]: t for t in verdict["tasks"]}
    assert set(tasks) == {ONE, TWO} and tasks[TWO]["decision"] == "GO"
    one = tasks[ONE]
    side, other = ("b", "a") if missing_in == "a" else ("a", "b")
    assert one[side]["value"] == pytest.approx(0.5) and one[other] is None
    assert one["metric"] == ""
    if missing_in == "a":
        assert (one["decision"], one["reason"]) == ("INCONCLUSIVE",
                                                    "no baseline: not finished in A")
        assert code == 3
    else:
        assert (one["decision"], one["reason"]) == ("NO-GO", "finished in A, not in B")
        assert code == 1


def test_a_task_is_found_by_its_full_or_its_last_dotted_name(tmp_path: Path) -> None:
    run = submit(tmp_path, 1)
    task_dir = run / "models" / "solo" / "tasks" / ONE
    task_dir.mkdir(parents=True)
    finalize_task(task_dir, TaskResult("nemo.mmlu_pro.cot", "ut-harness", "1.0", [
        Metric("cot", "exact_match", 0.5, 0.1, "strict-match", 2)]).to_json(),
        {"duration_s": 1.0})
    for name in ("nemo.mmlu_pro.cot", "cot"):
        assert set(results_frame([run], tasks=[name])["task"]) == {"nemo.mmlu_pro.cot"}
    assert results_frame([run], tasks=["mmlu_pro.cot"]).empty
    assert list(results_frame([run], models=["nope"]).columns) == list(results_frame([run]).columns)


def test_the_in_job_aggregation_writes_the_runs_table_and_says_what(
        two_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m hpceval.job aggregate` is what a sweep's aggregation job runs:
    results.csv with every metric row, one line saying how many, exit 0 (with --resubmit and
    no successor to wait for, the same)."""
    from hpceval.job.__main__ import main

    script = tmp_path / "aggregate.sbatch"
    script.write_text("#!/bin/bash\n")
    for extra in ([], ["--resubmit", str(script)]):
        assert main(["aggregate", "--run-dir", str(two_models), *extra]) == 0
        table = (two_models / "results.csv").read_text().splitlines()
        assert len(table) == 5 and table[0].startswith("invocation_id,model,task,")
        assert capsys.readouterr().out == (
            f"aggregate: 4 metric rows from 2 model(s) -> {two_models / 'results.csv'}\n")
    with pytest.raises(SystemExit):
        main(["aggregate"])  # the run directory is required
    assert "--run-dir" in capsys.readouterr().err


def test_scripts_rendered_before_the_move_still_aggregate_and_export(
        two_models: Path, tmp_path: Path) -> None:
    """A run submitted before the steps moved to `python -m hpceval.job` carries scripts that
    name the old modules: they run the same steps."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-m", "hpceval.results.table", "aggregate",
                           "--run-dir", str(two_models)], capture_output=True, text=True,
                          env=env, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "aggregate: 4 metric rows from 2 model(s)" in done.stdout
    out = tmp_path / "exported"
    done = subprocess.run([sys.executable, "-m", "hpceval.results.autoexport", "--run-dir",
                           str(two_models), "--dest", "local", "--local-dir", str(out)],
                          capture_output=True, text=True, env=env, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("local: ") and any(out.iterdir())
