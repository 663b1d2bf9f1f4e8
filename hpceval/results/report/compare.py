"""Models side by side per task: each score with its interval, neighbours tested pairwise.

Per task, each model's primary metric from the run that counts (results.table.counting_rows:
the newest run that finished it), best first. Each score's interval follows results.stats
(Wilson for proportions, clustered over subtasks, bootstrap otherwise; the harness's stderr
only without sample files), named next to the numbers. Each pair of neighbours in the ranking
is compared by results.compare.diff_pair: a paired test on the items both scored when both have
per-sample files, else the marginal fallback, which the sentence names. p-values are
Holm-adjusted across every pair on the page.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from hpceval.results.flags import Flag
from hpceval.results.stats import Interval

Z95 = 1.96  # the score-vs-step page's whiskers (value +- 1.96 x the harness's stderr)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Score:
    model: str
    value: float
    n: int | None
    interval: Interval | None
    run: str = ""
    flags: list[Flag] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    text: str
    apart: bool  # the difference is significant (after Holm)
    paired: bool


@dataclass
class TaskComparison:
    task: str
    metric: str
    scores: list[Score]  # best first
    pairs: list[Any] = field(default_factory=list)  # results.compare.TaskDiff per neighbours

    def verdicts(self) -> list[Verdict]:
        """One sentence per neighbouring pair in the ranking."""
        return [_verdict(d) for d in self.pairs]


def _verdict(d: Any) -> Verdict:
    hi, lo = d.b.model, d.a.model  # diff_pair(lower, higher): B is the better-ranked one
    if d.p_value is None:
        return Verdict(f"{hi} vs {lo}: {d.note}", False, False)
    apart = d.p_adjusted is not None and d.p_adjusted < 1 - CONFIDENCE
    ci = d.interval.text() if d.interval else "no interval"
    if d.paired is not None:
        how = f"paired {d.test} on {d.paired.n} items"
        extra = f"; {d.note}" if d.note else ""
    else:
        how, extra = f"{d.test}, {d.note}", ""
    ahead = f"{hi} is ahead" if apart and d.diff > 0 else (
        f"{lo} is ahead" if apart else "the difference may be noise")
    return Verdict(f"{hi} vs {lo}: {how}: difference {d.diff:+.3g}, 95% CI {ci}, "
                   f"p = {d.p_value:.3g} (Holm {d.p_adjusted:.3g}): {ahead}{extra}",
                   apart, d.paired is not None)


def comparisons(frame: Any) -> list[TaskComparison]:
    """Per task: each model's primary metric from the run that counts, best first.

    Sample files are read through results.compare's per-page cache (html_report fills it)."""
    from hpceval.results.compare import apply_holm, diff_pair, side_score
    from hpceval.results.table import counting_rows

    if frame.empty:
        return []
    chosen = counting_rows(frame[frame["primary"]])
    by_task: dict[str, list[dict[str, Any]]] = {}
    # one to_dict for the page (per-group calls cost most of this function on large pages)
    for row in chosen.sort_values(["task", "value", "model"],
                                  ascending=[True, False, True]).to_dict("records"):
        by_task.setdefault(str(row["task"]), []).append(row)
    out = []
    for task, rows in by_task.items():
        first = rows[0]
        metric = str(first["metric"]) + (f" ({first['filter']})" if first["filter"] else "")
        sides = [side_score(row) for row in rows]
        scores = [Score(s.model, s.value, s.n, s.interval, s.run, s.flags) for s, _ in sides]
        pairs = [diff_pair(lower, higher, 1 - CONFIDENCE, (low_side, high_side))
                 for (higher, high_side), (lower, low_side)
                 in itertools.pairwise(zip(rows, sides, strict=True))]
        out.append(TaskComparison(str(task), metric, scores, pairs))
    apply_holm([p for c in out for p in c.pairs], 1 - CONFIDENCE)
    return out
