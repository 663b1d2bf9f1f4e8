"""`hpceval gate`: GO / NO-GO / INCONCLUSIVE for candidate B against baseline A, per a policy.

A policy file (YAML)::

    alpha: 0.05            # family-wise error rate over the tasks gated at once
    max_drop: 0.01         # B may score at most this much below A (default 0)
    min_gain: null         # or: B must beat A by at least this
    tasks:                 # per task (harness.task, short name, or a glob: "mmlu*")
      gsm8k: {max_drop: 0.02}
      "lm-evaluation-harness.*": {alpha: 0.01}

Per task, with d = B - A and its interval at level 1 - alpha/m (Bonferroni over the m tasks,
so the whole verdict keeps its error rate) and threshold t = min_gain, else -max_drop:
GO when the interval's low end is >= t; NO-GO when its high end is < t; INCONCLUSIVE
otherwise (too few items to decide; the minimum detectable effect says how far off). A task
flagged on B (results.flags), or finished in A but not in B, is NO-GO. The overall decision
is the worst task's: exit 1 for any NO-GO, else 3 for any INCONCLUSIVE, else 0.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.config.errors import ConfigError
from hpceval.results.compare import TaskDiff, diff_pair, paired_rows, side_score

GO, NO_GO, INCONCLUSIVE = "GO", "NO-GO", "INCONCLUSIVE"
EXIT = {GO: 0, NO_GO: 1, INCONCLUSIVE: 3}
_RULE_KEYS = {"alpha", "max_drop", "min_gain"}


@dataclass(frozen=True)
class Rule:
    alpha: float = 0.05
    max_drop: float = 0.0
    min_gain: float | None = None

    @property
    def threshold(self) -> float:
        return self.min_gain if self.min_gain is not None else -self.max_drop


@dataclass(frozen=True)
class Policy:
    default: Rule
    tasks: tuple[tuple[str, Rule], ...] = ()

    def rule_for(self, task: str) -> Rule:
        short = task.rsplit(".", 1)[-1]
        for pattern, rule in self.tasks:
            if pattern in (task, short) or fnmatch.fnmatchcase(task, pattern) \
                    or fnmatch.fnmatchcase(short, pattern):
                return rule
        return self.default


def _rule(data: Any, where: str, base: Rule) -> Rule:
    if not isinstance(data, dict):
        raise ConfigError.at(where, f"expected a mapping, got {type(data).__name__}",
                             "write e.g. {max_drop: 0.01}")
    unknown = sorted(set(data) - _RULE_KEYS)
    if unknown:
        raise ConfigError.at(f"{where}.{unknown[0]}", "unknown key",
                             f"use {', '.join(sorted(_RULE_KEYS))}")
    values: dict[str, Any] = {"alpha": base.alpha, "max_drop": base.max_drop,
                              "min_gain": base.min_gain}
    for key, value in data.items():
        if value is None and key == "min_gain":
            values[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError.at(f"{where}.{key}", f"expected a number, got {value!r}",
                                 f"e.g. {key}: 0.01")
        values[key] = float(value)
    if not 0 < values["alpha"] < 1:
        raise ConfigError.at(f"{where}.alpha", f"{values['alpha']} is not between 0 and 1",
                             "e.g. alpha: 0.05")
    if values["max_drop"] < 0:
        raise ConfigError.at(f"{where}.max_drop", "a drop is given as a positive number",
                             f"max_drop: {-values['max_drop']}")
    return Rule(**values)


def load_policy(path: Path) -> Policy:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError.at(str(path), f"cannot read the policy: {exc.strerror}",
                             "pass an existing YAML file to --policy") from exc
    except yaml.YAMLError as exc:
        raise ConfigError.at(str(path), f"not valid YAML: {exc}", "fix the file") from exc
    if not isinstance(data, dict):
        raise ConfigError.at(str(path), "the policy must be a mapping",
                             "see `hpceval gate --help`")
    tasks = data.get("tasks") or {}
    default = _rule({k: v for k, v in data.items() if k != "tasks"}, "policy", Rule())
    if not isinstance(tasks, dict):
        raise ConfigError.at("policy.tasks", "expected a mapping of task -> rule",
                             "write tasks: {gsm8k: {max_drop: 0.02}}")
    return Policy(default, tuple((str(name), _rule(rule, f"policy.tasks.{name}", default))
                                 for name, rule in tasks.items()))


@dataclass
class TaskDecision:
    decision: str
    reason: str
    diff: TaskDiff

    def as_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "reason": self.reason, **self.diff.as_dict()}


def _decide(d: TaskDiff, rule: Rule) -> tuple[str, str]:
    if d.b and d.b.flags:
        return NO_GO, "B is flagged: " + "; ".join(f.text() for f in d.b.flags)
    if d.interval is None:
        return INCONCLUSIVE, d.note or "no interval for the difference"
    lo, hi, t = d.interval.low, d.interval.high, rule.threshold
    what = (f"required gain {rule.min_gain:g}" if rule.min_gain is not None
            else f"allowed drop {rule.max_drop:g}")
    span = f"B - A = {d.diff:+.4g}, interval {lo:+.4g} to {hi:+.4g} ({d.interval.method})"
    if lo >= t:
        return GO, f"{span}: within the {what}"
    if hi < t:
        return NO_GO, f"{span}: beyond the {what}"
    mde = f"; detectable at this n: {d.mde:.3g}" if d.mde is not None else ""
    return INCONCLUSIVE, f"{span}: straddles the {what}{mde}"


def gate(frame_a: Any, frame_b: Any, policy: Policy, tasks: Sequence[str] = ()
         ) -> list[TaskDecision]:
    """One decision per task finished in A or B (or only `tasks`)."""
    rows_a, rows_b, names = paired_rows(frame_a, frame_b, tasks)
    out = []
    m = max(1, len(names))
    for task in names:
        rule = policy.rule_for(task)
        if task not in rows_b:
            score, _ = side_score(rows_a[task])
            out.append(TaskDecision(NO_GO, "finished in A, not in B",
                                    TaskDiff(task, "", score, None)))
            continue
        if task not in rows_a:
            score, _ = side_score(rows_b[task])
            out.append(TaskDecision(INCONCLUSIVE, "no baseline: not finished in A",
                                    TaskDiff(task, "", None, score)))
            continue
        diff = diff_pair(rows_a[task], rows_b[task], rule.alpha / m)
        decision, reason = _decide(diff, rule)
        out.append(TaskDecision(decision, reason, diff))
    return out


def overall(decisions: Sequence[TaskDecision]) -> str:
    found = {d.decision for d in decisions}
    if not decisions:
        return INCONCLUSIVE
    return NO_GO if NO_GO in found else INCONCLUSIVE if INCONCLUSIVE in found else GO
