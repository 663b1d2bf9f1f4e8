"""Models side by side per task, with 95% confidence intervals where the harness gave a stderr.

The interval is value +- 1.96 x stderr (normal approximation, as lm-eval's own stderr assumes).
Two models whose intervals overlap are not called different: the page says so for each pair of
neighbours in the ranking. Overlap is the cautious reading (non-overlap implies a significant
difference at about 95%; overlap does not prove there is none), which is the one a reader
deciding between checkpoints needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Z95 = 1.96


@dataclass(frozen=True)
class Score:
    model: str
    value: float
    stderr: float | None
    n: int | None

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.stderr is None:
            return None
        return self.value - Z95 * self.stderr, self.value + Z95 * self.stderr


@dataclass(frozen=True)
class TaskComparison:
    task: str
    metric: str
    scores: list[Score]  # best first

    def verdicts(self) -> list[str]:
        """One sentence per neighbouring pair in the ranking."""
        out = []
        for a, b in zip(self.scores, self.scores[1:], strict=False):
            ia, ib = a.interval, b.interval
            if ia is None or ib is None:
                out.append(f"{a.model} vs {b.model}: no stderr from the harness, "
                           "so no interval to compare")
            elif ia[0] <= ib[1] and ib[0] <= ia[1]:
                out.append(f"{a.model} vs {b.model}: 95% intervals overlap: the difference "
                           f"({a.value - b.value:.3g}) may be noise")
            else:
                out.append(f"{a.model} vs {b.model}: 95% intervals do not overlap: "
                           f"{a.model} is ahead by {a.value - b.value:.3g}")
        return out


def _number(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


def comparisons(frame: Any) -> list[TaskComparison]:
    """Per task: each model's primary metric from its newest run, best first."""
    if frame.empty:
        return []
    chosen = frame[frame["primary"]].sort_values("invocation_id")
    chosen = chosen.drop_duplicates(["model", "task"], keep="last")
    out = []
    for task, group in chosen.groupby("task", sort=True):
        group = group.sort_values(["value", "model"], ascending=[False, True])
        first = group.iloc[0]
        metric = str(first["metric"]) + (f" ({first['filter']})" if first["filter"] else "")
        scores = []
        for r in group.itertuples():
            n = _number(getattr(r, "n_samples", None))
            scores.append(Score(str(r.model), float(r.value),
                                _number(getattr(r, "stderr", None)),
                                None if n is None else int(n)))
        out.append(TaskComparison(str(task), metric, scores))
    return out
