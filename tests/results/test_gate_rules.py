"""The gate's rules, decided without runs: a policy file's every error names the key, the problem
and the fix; which rule a task gets; the decision at the threshold's edges and its reason. The
runs behind `hpceval gate` are in test_compare.py; these keep the mutation score of
hpceval/results/gate.py (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpceval.config.errors import ConfigError
from hpceval.results.compare import SideScore, TaskDiff
from hpceval.results.flags import Flag
from hpceval.results.gate import (
    GO,
    INCONCLUSIVE,
    NO_GO,
    Rule,
    TaskDecision,
    _decide,
    flag_actions,
    load_policy,
    overall,
)
from hpceval.results.stats import Interval


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2]\n", "{path}: the policy must be a mapping (fix: see `hpceval gate --help`)"),
    ("a: [\n", "{path}: not valid YAML: "),
    ("tasks: [gsm8k]\n", "policy.tasks: expected a mapping of task -> rule "
     "(fix: write tasks: {{gsm8k: {{max_drop: 0.02}}}})"),
    ("tasks: {gsm8k: 0.1}\n", "policy.tasks.gsm8k: expected a mapping, got float "
     "(fix: write e.g. {{max_drop: 0.01}})"),
    ("max_dorp: 0.1\n",
     "policy.max_dorp: unknown key (fix: use alpha, flags, max_drop, min_gain)"),
    ("tasks: {gsm8k: {zz: 1, aa: 2}}\n",
     "policy.tasks.gsm8k.aa: unknown key (fix: use alpha, flags, max_drop, min_gain)"),
    ("max_drop: yes\n", "policy.max_drop: expected a number, got True (fix: e.g. max_drop: 0.01)"),
    ("tasks: {gsm8k: {min_gain: '0.1'}}\n", "policy.tasks.gsm8k.min_gain: expected a number, "
     "got '0.1' (fix: e.g. min_gain: 0.01)"),
    ("alpha: 0\n", "policy.alpha: 0.0 is not between 0 and 1 (fix: e.g. alpha: 0.05)"),
    ("alpha: 1\n", "policy.alpha: 1.0 is not between 0 and 1 (fix: e.g. alpha: 0.05)"),
    ("tasks: {gsm8k: {alpha: 1.5}}\n",
     "policy.tasks.gsm8k.alpha: 1.5 is not between 0 and 1 (fix: e.g. alpha: 0.05)"),
    ("max_drop: -0.02\n",
     "policy.max_drop: a drop is given as a positive number (fix: max_drop: 0.02)"),
    # the per-flag actions (issue 36 item 4)
    ("flags: [count]\n", "policy.flags: expected a mapping of flag -> action "
     "(fix: write e.g. flags: {{count: inconclusive}})"),
    ("flags: {cuont: warn}\n", "policy.flags.cuont: unknown flag (fix: use all-unparsable, "
     "all-zero, count, count-unverified, infra-errors, length, missing, reasoning-only)"),
    ("flags: {count: stop}\n",
     "policy.flags.count: 'stop' is no action (fix: use no-go, inconclusive, warn)"),
    ("flags: {missing: warn}\n", "policy.flags.missing: 'warn' is no action for a task missing "
     "in B (fix: use no-go, inconclusive)"),
    ("tasks: {gsm8k: {flags: {length: go}}}\n",
     "policy.tasks.gsm8k.flags.length: 'go' is no action (fix: use no-go, inconclusive, warn)"),
])
def test_every_policy_error_names_the_key_the_problem_and_the_fix(
        tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert str(caught.value).startswith(message.format(path=path)), str(caught.value)
    assert caught.value.exit_code == 2
    if "YAML" in message:
        assert str(caught.value).endswith("(fix: fix the file)")
    assert caught.value.exit_code == 2


def test_an_unreadable_policy_names_the_file_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load_policy(missing)
    assert str(caught.value) == (f"{missing}: cannot read the policy: No such file or directory"
                                 " (fix: pass an existing YAML file to --policy)")


def test_a_policy_is_read_as_utf8_whatever_the_locale(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_ALL", "C")
    path = tmp_path / "policy.yaml"
    path.write_text("tasks: {'größe': {max_drop: 0.5}}\n", encoding="utf-8")
    assert load_policy(path).rule_for("größe").max_drop == 0.5


def test_task_rules_inherit_the_top_level_and_min_gain_null_clears_it(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("alpha: 0.01\nmax_drop: 0.03\nmin_gain: 0.1\n"
                    "tasks:\n  gsm8k: {max_drop: 0.02, min_gain: null}\n"
                    "  'mmlu*': {alpha: 0.2}\n  lm-evaluation-harness.ifeval: {min_gain: 0}\n")
    policy = load_policy(path)
    assert policy.default == Rule(0.01, 0.03, 0.1)
    assert policy.rule_for("gsm8k") == Rule(0.01, 0.02, None)
    assert policy.rule_for("lm-evaluation-harness.gsm8k") == Rule(0.01, 0.02, None)  # short name
    assert policy.rule_for("mmlu_pro") == Rule(0.2, 0.03, 0.1)  # a glob of the short name
    assert policy.rule_for("lm-evaluation-harness.mmlu_pro") == Rule(0.2, 0.03, 0.1)
    assert policy.rule_for("nel.lm-evaluation-harness.mmlu_pro") == Rule(0.2, 0.03, 0.1)
    assert policy.rule_for("nel.lm-evaluation-harness.gsm8k") == Rule(0.01, 0.02, None)
    assert policy.rule_for("lm-evaluation-harness.ifeval") == Rule(0.01, 0.03, 0.0)
    assert policy.rule_for("simple_evals.ifeval") == policy.default  # the full name differs
    assert policy.rule_for("hellaswag") == policy.default
    assert Rule(max_drop=0.02).threshold == -0.02 and Rule(min_gain=0.0).threshold == 0.0


def test_keys_after_a_cleared_min_gain_still_count(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("min_gain: 0.1\ntasks: {gsm8k: {min_gain: null, max_drop: 0.02}}\n")
    assert load_policy(path).rule_for("gsm8k") == Rule(0.05, 0.02, None)


def test_an_empty_policy_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("")
    policy = load_policy(path)
    assert policy.default == Rule(0.05, 0.0, None) and policy.tasks == ()


def _diff(low: float, high: float, *, mde: float | None = None,
          flags: tuple[Flag, ...] = ()) -> TaskDiff:
    b = SideScore("run-b", "m", 0.5, 100, None, list(flags))
    return TaskDiff("t", "acc", None, b, diff=(low + high) / 2,
                    interval=Interval(low, high, "Newcombe"), mde=mde)


@pytest.mark.parametrize(("low", "high", "decision"), [
    (-0.02, 0.1, GO),             # the low end exactly at -max_drop: within
    (-0.021, 0.1, INCONCLUSIVE),
    (-0.1, -0.02, INCONCLUSIVE),  # the high end exactly at the threshold: not beyond it
    (-0.1, -0.0201, NO_GO),
])
def test_the_thresholds_edges(low: float, high: float, decision: str) -> None:
    assert _decide(_diff(low, high), Rule(max_drop=0.02))[0] == decision


def test_each_decision_gives_its_numbers_and_rule() -> None:
    drop, gain = Rule(max_drop=0.02), Rule(min_gain=0.05)
    assert _decide(_diff(0.1, 0.3), gain) == (
        GO, "B - A = +0.2, interval +0.1 to +0.3 (Newcombe): within the required gain 0.05")
    assert _decide(_diff(-0.3, -0.1), drop) == (
        NO_GO, "B - A = -0.2, interval -0.3 to -0.1 (Newcombe): beyond the allowed drop 0.02")
    assert _decide(_diff(-0.1, 0.1, mde=0.1234), drop) == (
        INCONCLUSIVE, "B - A = +0, interval -0.1 to +0.1 (Newcombe): straddles the allowed "
        "drop 0.02; detectable at this n: 0.123")
    assert _decide(_diff(-0.1, 0.1), drop)[1].endswith("straddles the allowed drop 0.02")


def test_the_worst_flag_action_decides_over_a_go() -> None:
    flags = (Flag("all-zero", "every sample scored 0"), Flag("count", "150 of 198"),
             Flag("length", "20 of 100"))
    assert _decide(_diff(0.1, 0.3, flags=flags), Rule(max_drop=1.0)) == (
        NO_GO, "B is flagged all-zero (no-go by the policy), count (inconclusive by the "
        "policy); B - A = +0.2, interval +0.1 to +0.3 (Newcombe): within the allowed drop 1")


def test_no_interval_is_inconclusive_with_the_comparisons_note() -> None:
    bare = TaskDiff("t", "acc", None, None)
    assert _decide(bare, Rule()) == (INCONCLUSIVE, "no interval for the difference")
    noted = TaskDiff("t", "acc", None, None, note="no samples in B")
    assert _decide(noted, Rule()) == (INCONCLUSIVE, "no samples in B")


@pytest.mark.parametrize(("decisions", "expected"), [
    ((), INCONCLUSIVE),
    ((GO, GO), GO),
    ((GO, INCONCLUSIVE), INCONCLUSIVE),
    ((INCONCLUSIVE, NO_GO, GO), NO_GO),
])
def test_the_overall_decision_is_the_worst_tasks(decisions: tuple[str, ...],
                                                  expected: str) -> None:
    rows = [TaskDecision(d, "", TaskDiff("t", "", None, None)) for d in decisions]
    assert overall(rows) == expected


def test_the_default_flag_actions_and_their_overrides(tmp_path: Path) -> None:
    """Scores that mean nothing block; lost items leave the decision open; what can only
    lower B's score, or cannot be told from a small subtask, warns."""
    assert dict(Rule().flags) == {
        "all-zero": "no-go", "all-unparsable": "no-go", "count": "inconclusive",
        "count-unverified": "warn", "length": "warn", "reasoning-only": "warn",
        "infra-errors": "inconclusive", "missing": "no-go"}
    path = tmp_path / "policy.yaml"
    path.write_text("flags: {count: warn, length: inconclusive}\n"
                    "tasks: {gsm8k: {flags: {count: no-go}}}\n")
    policy = load_policy(path)
    assert policy.rule_for("hellaswag").action("count") == "warn"
    assert policy.rule_for("hellaswag").action("length") == "inconclusive"
    assert policy.rule_for("gsm8k").action("count") == "no-go"
    assert policy.rule_for("gsm8k").action("length") == "inconclusive"  # inherited
    assert policy.rule_for("gsm8k").action("all-zero") == "no-go"


def _with_a(d: TaskDiff, value: float) -> TaskDiff:
    d.a = SideScore("run-a", "m", value, 100, None, [])
    return d


@pytest.mark.parametrize(("code", "low", "decision"), [
    ("all-zero", 0.1, NO_GO),            # a meaningless score: no-go whatever the interval
    ("count", 0.1, INCONCLUSIVE),        # items lost: a GO cannot stand
    ("count", -0.4, NO_GO),              # ... but a NO-GO on the items scored still does
    ("count-unverified", 0.1, GO),       # warns only
    ("length", 0.1, GO),
    ("reasoning-only", -0.4, NO_GO),     # the interval's own NO-GO
])
def test_each_flag_does_what_its_default_action_says(code: str, low: float,
                                                     decision: str) -> None:
    d = _with_a(_diff(low, low + 0.1, flags=(Flag(code, "why"),)), 0.5)
    assert _decide(d, Rule(max_drop=0.2))[0] == decision
    [done] = flag_actions(d, Rule(max_drop=0.2))
    assert (done.code, done.action) == (code, dict(Rule().flags)[code])


def test_all_zero_on_b_is_no_regression_where_a_scores_zero_too() -> None:
    flagged = (Flag("all-zero", "every one of the 60 samples scored 0"),)
    d = _with_a(_diff(-0.05, 0.05, flags=flagged), 0.0)
    assert _decide(d, Rule(max_drop=0.1))[0] == GO  # the interval decides
    [done] = flag_actions(d, Rule(max_drop=0.1))
    assert done.action == "warn" and done.why == "A scores 0 on this task too: not a regression"
    assert _decide(_with_a(_diff(-0.05, 0.05, flags=flagged), 0.2), Rule(max_drop=0.1)) == (
        NO_GO, "B is flagged all-zero (no-go by the policy); B - A = +0, interval -0.05 to "
        "+0.05 (Newcombe): within the allowed drop 0.1")


def test_a_policy_can_make_a_flag_warn_only(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("max_drop: 0.2\nflags: {count: warn}\n")
    d = _with_a(_diff(0.1, 0.2, flags=(Flag("count", "150 of 198"),)), 0.5)
    assert _decide(d, load_policy(path).default)[0] == GO
