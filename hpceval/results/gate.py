"""`hpceval gate`: GO / NO-GO / INCONCLUSIVE for candidate B against baseline A, per a policy.

A policy file (YAML)::

    alpha: 0.05            # family-wise error rate over the tasks gated at once
    max_drop: 0.01         # B may score at most this much below A (default 0)
    min_gain: null         # or: B must beat A by at least this
    flags:                 # what a flag on B does (results.flags): no-go, inconclusive, warn
      count: warn
    tasks:                 # per task (harness.task, short name, or a glob: "mmlu*")
      gsm8k: {max_drop: 0.02, flags: {length: inconclusive}}
      "lm-evaluation-harness.*": {alpha: 0.01}

Per task, with d = B - A and its interval at level 1 - alpha/m (Bonferroni over the m tasks,
so the whole verdict keeps its error rate) and threshold t = min_gain, else -max_drop:
GO when the interval's low end is >= t; NO-GO when its high end is < t; INCONCLUSIVE
otherwise (too few items to decide; the minimum detectable effect says how far off).

Each flag on B then acts as the policy says (DEFAULT_ACTIONS, chosen so that good candidates
pass): ``no-go`` makes the task NO-GO; ``inconclusive`` keeps it from GO (a NO-GO stands);
``warn`` is shown and decides nothing. A flag of the baseline A decides nothing. ``all-zero`` on
B where A's same task scores 0 too is no regression: it warns, whatever the policy. A task
finished in A but not in B is ``missing`` (no-go or inconclusive; it has no score to be GO).
The overall decision is the worst task's: exit 1 for any NO-GO, else 3 for any INCONCLUSIVE,
else 0; a bad policy is a ConfigError (exit 2).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpceval.config.errors import ConfigError
from hpceval.results.compare import TaskDiff, diff_pair, paired_rows, side_score
from hpceval.results.flags import FLAG_CODES

GO, NO_GO, INCONCLUSIVE = "GO", "NO-GO", "INCONCLUSIVE"
EXIT = {GO: 0, NO_GO: 1, INCONCLUSIVE: 3}
_RULE_KEYS = {"alpha", "flags", "max_drop", "min_gain"}
ACTIONS = ("no-go", "inconclusive", "warn")
MISSING = "missing"  # not a flag of results.flags: the task finished in A, not in B
MISSING_ACTIONS = ("no-go", "inconclusive")
# What a release manager would accept: a score that means nothing (every sample 0, nothing
# parsed) or a task not run blocks; lost items (count) leave a GO unproven, since the items
# lost are often the hard ones (timeouts); cut generations and answers left in the trace can
# only lower B's score, so the interval's decision stands; a subtask of unknown size may just
# be smaller than the limit; answers lost to the infrastructure were scored as wrong, so they
# leave a GO unproven as lost items do.
DEFAULT_ACTIONS: tuple[tuple[str, str], ...] = (
    ("all-zero", "no-go"), ("all-unparsable", "no-go"), ("count", "inconclusive"),
    ("count-unverified", "warn"), ("length", "warn"), ("reasoning-only", "warn"),
    ("infra-errors", "inconclusive"),
    (MISSING, "no-go"))
_DECISION = {"no-go": NO_GO, "inconclusive": INCONCLUSIVE, "warn": GO}
_RANK = {GO: 0, INCONCLUSIVE: 1, NO_GO: 2}
ZERO_BASELINE = "A scores 0 on this task too: not a regression"


@dataclass(frozen=True)
class Rule:
    alpha: float = 0.05
    max_drop: float = 0.0
    min_gain: float | None = None
    flags: tuple[tuple[str, str], ...] = DEFAULT_ACTIONS  # (flag code, action), every code

    @property
    def threshold(self) -> float:
        return self.min_gain if self.min_gain is not None else -self.max_drop

    def action(self, code: str) -> str:
        # a code no policy knows (a flag added later) blocks rather than passing unseen
        return dict(self.flags).get(code, "no-go")


def _flag_actions(data: Any, where: str, base: tuple[tuple[str, str], ...]
                  ) -> tuple[tuple[str, str], ...]:
    if not isinstance(data, dict):
        raise ConfigError.at(where, "expected a mapping of flag -> action",
                             "write e.g. flags: {count: inconclusive}")
    known = sorted((*FLAG_CODES, MISSING))
    out = dict(base)
    for code, action in data.items():
        if code not in known:
            raise ConfigError.at(f"{where}.{code}", "unknown flag", f"use {', '.join(known)}")
        choices = MISSING_ACTIONS if code == MISSING else ACTIONS
        if action not in choices:
            what = " for a task missing in B" if code == MISSING else ""
            raise ConfigError.at(f"{where}.{code}", f"{action!r} is no action{what}",
                                 f"use {', '.join(choices)}")
        out[code] = action
    return tuple(out.items())


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
                              "min_gain": base.min_gain, "flags": base.flags}
    for key, value in data.items():
        if key == "flags":
            values[key] = _flag_actions(value, f"{where}.flags", base.flags)
            continue
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


@dataclass(frozen=True)
class FlagAction:
    """What one flag on B did to its task's decision, and why (the policy, or the rule that a
    zero baseline makes all-zero no regression)."""

    code: str
    message: str
    action: str  # no-go, inconclusive or warn
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"side": "B", "code": self.code, "message": self.message,
                "action": self.action, "why": self.why}

    def text(self) -> str:
        return f"{self.code}: {self.message} -> {self.action} ({self.why})"


@dataclass
class TaskDecision:
    decision: str
    reason: str
    diff: TaskDiff
    flags: list[FlagAction] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "reason": self.reason, **self.diff.as_dict(),
                "flag_actions": [f.as_dict() for f in self.flags]}


def flag_actions(d: TaskDiff, rule: Rule) -> list[FlagAction]:
    """What each flag of B does under `rule`."""
    zero_baseline = d.a is not None and d.a.value == 0
    out = []
    for flag in d.b.flags if d.b else []:
        if flag.code == "all-zero" and zero_baseline:
            out.append(FlagAction(flag.code, flag.message, "warn", ZERO_BASELINE))
        else:
            out.append(FlagAction(flag.code, flag.message, rule.action(flag.code),
                                  "by the policy"))
    return out


def _worst(decision: str, reason: str, actions: Sequence[FlagAction]) -> tuple[str, str]:
    """The decision once the flags have acted: the worst of the interval's and theirs."""
    acting = [a for a in actions if _RANK[_DECISION[a.action]] > _RANK[decision]]
    if not acting:
        return decision, reason
    worst = max((_DECISION[a.action] for a in acting), key=_RANK.__getitem__)
    said = ", ".join(f"{a.code} ({a.action} by the policy)" for a in acting)
    return worst, f"B is flagged {said}; {reason}"


def _interval_decision(d: TaskDiff, rule: Rule) -> tuple[str, str]:
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


def _decide(d: TaskDiff, rule: Rule) -> tuple[str, str]:
    return _worst(*_interval_decision(d, rule), flag_actions(d, rule))


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
            action = rule.action(MISSING)
            reason = "finished in A, not in B"
            out.append(TaskDecision(
                _DECISION[action], reason + ("" if action == "no-go"
                                             else f" ({action} by the policy)"),
                TaskDiff(task, "", score, None),
                [FlagAction(MISSING, reason, action, "by the policy")]))
            continue
        if task not in rows_a:
            score, _ = side_score(rows_b[task])
            diff = TaskDiff(task, "", None, score)
            actions = flag_actions(diff, rule)
            decision, reason = _worst(INCONCLUSIVE, "no baseline: not finished in A", actions)
            out.append(TaskDecision(decision, reason, diff, actions))
            continue
        diff = diff_pair(rows_a[task], rows_b[task], rule.alpha / m)
        decision, reason = _decide(diff, rule)
        out.append(TaskDecision(decision, reason, diff, flag_actions(diff, rule)))
    return out


def overall(decisions: Sequence[TaskDecision]) -> str:
    found = {d.decision for d in decisions}
    if not decisions:
        return INCONCLUSIVE
    return NO_GO if NO_GO in found else INCONCLUSIVE if INCONCLUSIVE in found else GO
