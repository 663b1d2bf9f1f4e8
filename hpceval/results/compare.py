"""Run A against run B per task: scores with intervals, the difference, its test, a verdict.

Each side is a results frame (``results.table.results_frame``) narrowed to what the user named;
``counting_rows`` then picks, per task, the one run that counts (newest finished). Where both
tasks have per-sample files that share items the comparison is paired (``results.paired``);
otherwise it falls back to the marginal numbers (unpaired normal test from the harness's
stderr) and says so. p-values are Holm-adjusted across the tasks compared at once; the verdict
uses the adjusted value. Difference = B - A.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hpceval.results.flags import Flag, task_flags
from hpceval.results.paired import ItemScores, Paired, paired_comparison, read_item_scores
from hpceval.results.stats import (
    CONFIDENCE,
    Interval,
    holm,
    interval_for_scores,
    interval_for_summary,
    z_value,
)

UNPAIRED = "unpaired normal (harness stderr)"
BETTER, WORSE, SAME, UNDECIDED = "B better", "B worse", "no significant difference", \
    "no test possible"


@dataclass(frozen=True)
class SideScore:
    run: str  # the invocation id the number comes from
    model: str
    value: float
    n: int | None
    interval: Interval | None
    flags: list[Flag] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run, "model": self.model, "value": self.value, "n": self.n,
                "interval": self.interval.as_dict() if self.interval else None,
                "flags": [f.text() for f in self.flags]}


@dataclass
class TaskDiff:
    task: str
    metric: str
    a: SideScore | None
    b: SideScore | None
    diff: float | None = None
    interval: Interval | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    test: str = ""
    mde: float | None = None
    paired: Paired | None = None
    note: str = ""  # why the comparison is not paired, or why there is none
    verdict: str = UNDECIDED

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "metric": self.metric,
                "a": self.a.as_dict() if self.a else None,
                "b": self.b.as_dict() if self.b else None, "diff": self.diff,
                "interval": self.interval.as_dict() if self.interval else None,
                "p_value": self.p_value, "p_adjusted": self.p_adjusted, "test": self.test,
                "mde": self.mde, "paired": self.paired.as_dict() if self.paired else None,
                "note": self.note, "verdict": self.verdict}


_READ: dict[tuple[str, str, str | None], ItemScores] = {}


def item_scores(task_dir: str, metric: str, filter: str | None) -> ItemScores:
    """One read of a task's sample files per page or command (cleared by `fresh_reads`)."""
    key = (task_dir, metric, filter)
    if key not in _READ:
        _READ[key] = read_item_scores(task_dir, metric, filter)
    return _READ[key]


def remember(task_dir: str, metric: str, filter: str | None, items: ItemScores) -> None:
    """Scores a caller read itself (the report, in its one pass over the sample files)."""
    _READ[(task_dir, metric, filter)] = items


def fresh_reads() -> None:
    _READ.clear()


def _n(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        else int(value)


def _stderr(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        else float(value)


def row_filter(row: Any) -> str | None:
    f = row.get("filter")
    return f if isinstance(f, str) and f else None


def side_score(row: Any, confidence: float = CONFIDENCE) -> tuple[SideScore, ItemScores]:
    """A row of the results frame (primary metric) as a score with its interval and flags."""
    task_dir = row.get("task_dir")
    items = item_scores(str(task_dir), str(row["metric"]), row_filter(row)) \
        if isinstance(task_dir, str) else ItemScores()
    n = _n(row.get("n_samples"))
    if items.scores:
        clusters = items.clusters if items.files > 1 else None
        interval = interval_for_scores(list(items.scores.values()), clusters,
                                       confidence=confidence)
    else:
        interval = interval_for_summary(str(row["metric"]), float(row["value"]),
                                        _stderr(row.get("stderr")), n, confidence=confidence)
    flags = task_flags(task_dir, str(row["task"]), str(row["metric"]), row_filter(row), n,
                       items) if isinstance(task_dir, str) else []
    return SideScore(str(row["invocation_id"]), str(row["model"]), float(row["value"]), n,
                     interval, flags), items


def metric_label(row: Any) -> str:
    f = row_filter(row)
    return str(row["metric"]) + (f" ({f})" if f else "")


def diff_pair(row_a: Any, row_b: Any, alpha: float,
              sides: tuple[tuple[SideScore, ItemScores], tuple[SideScore, ItemScores]]
              | None = None) -> TaskDiff:
    """One task, both sides present: paired where sample files share items, else marginal.

    `sides`: the two side_score results when the caller has them already (the report)."""
    (a, items_a), (b, items_b) = sides or (side_score(row_a, 1 - alpha),
                                           side_score(row_b, 1 - alpha))
    out = TaskDiff(str(row_b["task"]), metric_label(row_b), a, b, diff=b.value - a.value)
    if row_a["metric"] != row_b["metric"]:
        out.note = f"different metrics ({row_a['metric']} vs {row_b['metric']}): not compared"
        return out
    paired = paired_comparison(items_a, items_b, alpha=alpha) \
        if items_a.scores and items_b.scores else None
    if paired is not None:
        out.paired, out.diff, out.interval = paired, paired.diff, paired.interval
        out.p_value, out.test, out.mde = paired.p_value, paired.test, paired.mde
        if paired.only_a or paired.only_b:
            out.note = (f"{paired.n} items scored by both; {paired.only_a} by A only, "
                        f"{paired.only_b} by B only (not in the test)")
        return out
    if not items_a.scores and not items_b.scores:
        why = "no per-sample files on either side"
    elif not (items_a.scores and items_b.scores):
        why = "per-sample files on one side only"
    else:
        why = "the two runs share no item (doc_id)"
    out.note = why + ": marginal fallback (unpaired)"
    sa, sb = _stderr(row_a.get("stderr")), _stderr(row_b.get("stderr"))
    if sa is None or sb is None:
        out.note += ", and no stderr from the harness: no test"
        return out
    se = math.sqrt(sa * sa + sb * sb)
    half = z_value(1 - alpha) * se
    diff = b.value - a.value
    out.interval = Interval(diff - half, diff + half, UNPAIRED, 1 - alpha)
    # two-sided normal p-value: 2 x (1 - Phi(|z|)) = erfc(|z| / sqrt 2)
    out.p_value = 1.0 if se == 0 else math.erfc(abs(diff) / se / math.sqrt(2))
    out.test = UNPAIRED
    return out


def primary_rows(frame: Any) -> dict[str, Any]:
    from hpceval.results.table import counting_rows

    if frame.empty:
        return {}
    chosen = counting_rows(frame[frame["primary"]])
    out: dict[str, Any] = {}
    for row in chosen.sort_values(["task", "model"]).to_dict("records"):
        out.setdefault(str(row["task"]), row)  # one model per side: the first if several
    return out


def paired_rows(frame_a: Any, frame_b: Any, tasks: Sequence[str] = ()
                ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Each side's primary row per task, and the tasks to judge: those finished on either
    side, or only `tasks` (a task key, or its name without the harness). Sample files are
    read afresh (fresh_reads): compare and gate alike."""
    fresh_reads()
    rows_a, rows_b = primary_rows(frame_a), primary_rows(frame_b)
    names = sorted(set(rows_a) | set(rows_b))
    if tasks:
        names = [t for t in names if t in tasks or t.rsplit(".", 1)[-1] in tasks]
    return rows_a, rows_b, names


def compare_frames(frame_a: Any, frame_b: Any, *, alpha: float = 1 - CONFIDENCE,
                   tasks: Sequence[str] = ()) -> list[TaskDiff]:
    """Per task present on either side (or only `tasks`), A against B."""
    rows_a, rows_b, names = paired_rows(frame_a, frame_b, tasks)
    out = []
    for task in names:
        if task in rows_a and task in rows_b:
            out.append(diff_pair(rows_a[task], rows_b[task], alpha))
        else:
            side = "B" if task in rows_a else "A"
            only = rows_a.get(task, rows_b.get(task))
            score, _ = side_score(only, 1 - alpha)
            out.append(TaskDiff(task, metric_label(only), score if side == "B" else None,
                                score if side == "A" else None,
                                note=f"not finished in {side}: nothing to compare"))
    apply_holm(out, alpha)
    return out


def apply_holm(diffs: list[TaskDiff], alpha: float) -> None:
    tested = [d for d in diffs if d.p_value is not None]
    for d, p in zip(tested, holm([d.p_value or 0.0 for d in tested]), strict=True):
        d.p_adjusted = p
        d.verdict = SAME if p >= alpha else (BETTER if (d.diff or 0.0) > 0 else WORSE)
