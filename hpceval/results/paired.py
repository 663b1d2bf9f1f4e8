"""Per-sample scores of a task, and the paired comparison of two runs that scored the same items.

Scores come from the harness's own sample files (lm-eval's ``samples_<subtask>_<date>.jsonl``,
also written by the eval-factory harnesses built on it): one record per item and filter, with
``doc_id`` and one value per metric. An item is (subtask, doc_id), the subtask taken from the
file name, so the items of mmlu_anatomy and mmlu_virology never collide.

The paired comparison of runs A and B (difference = B - A, B the candidate):

* 0/1 scores: McNemar's exact test (a two-sided binomial test on the discordant pairs, as
  statsmodels' ``mcnemar(exact=True)``), the difference's interval by Newcombe's method 10
  (hybrid Wilson score interval for paired proportions; never a point, even with no discordant
  pair);
* other scores: a paired permutation test (``scipy.stats.permutation_test``, sign flips within
  pairs, seeded) and a paired bootstrap interval of the mean difference;
* the minimum detectable effect at this n (two-sided alpha, power 0.8) from the spread of the
  differences;
* items scored by one run only are counted (``only_a``, ``only_b``) and shown, never dropped
  silently.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hpceval.results.sample_files import sample_files, subtask_of
from hpceval.results.stats import (
    BOOTSTRAP,
    CONFIDENCE,
    SEED,
    Interval,
    bootstrap_means,
    is_binary,
    proportion_interval,
    z_value,
)

POWER = 0.8
PERMUTATIONS = 9999
MCNEMAR = "McNemar exact"
PERMUTATION = "paired permutation"
NEWCOMBE = "Newcombe paired Wilson"
INVALID_ANSWERS = frozenset({"[invalid]", ""})  # lm-eval's filter output when nothing parsed


@dataclass
class ItemScores:
    """One run's per-item scores of one task for one metric (and filter)."""

    scores: dict[tuple[str, Any], float] = field(default_factory=dict)
    files: int = 0
    unparsable: int = 0  # answers the filter could not extract ([invalid] or empty)

    @property
    def clusters(self) -> list[str]:
        return [key[0] for key in self.scores]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _unparsable(record: dict[str, Any]) -> bool:
    resps = record.get("filtered_resps")
    if isinstance(resps, list) and len(resps) == 1 and isinstance(resps[0], str):
        return resps[0].strip() in INVALID_ANSWERS
    return False


def read_item_scores(task_dir: str, metric: str, filter: str | None = None,
                     on_line: Callable[[dict[str, Any] | None, str, int], Any] | None = None
                     ) -> ItemScores:
    """Every item's `metric` (records of `filter` only when given), from all sample files.

    `on_line(record or None, file, line number)` sees every line as it is decoded (the report
    takes its sample rows from the same pass) until it returns False."""
    out = ItemScores()
    for rel in sample_files(task_dir):
        out.files += 1
        subtask = subtask_of(rel)
        with open(os.path.join(task_dir, rel), encoding="utf-8", errors="replace") as handle:
            for number, text in enumerate(handle, 1):
                try:
                    record = json.loads(text)
                except ValueError:
                    record = None  # a line cut short by a killed harness: not a sample
                if not isinstance(record, dict):
                    record = None
                if on_line is not None and on_line(record, rel, number) is False:
                    on_line = None  # it has what it wants: the rest is scores only
                if record is None or (filter and record.get("filter", filter) != filter):
                    continue
                score = _number(record.get(metric))
                key = (subtask, record.get("doc_id"))
                if score is None or key in out.scores:
                    continue
                out.scores[key] = score
                out.unparsable += _unparsable(record)
    return out


@dataclass(frozen=True)
class Paired:
    n: int  # items both runs scored
    only_a: int
    only_b: int
    mean_a: float
    mean_b: float
    diff: float  # mean_b - mean_a over the common items
    interval: Interval
    p_value: float
    test: str
    mde: float  # the smallest |difference| this n detects at alpha with power 0.8
    discordant: tuple[int, int] | None = None  # (A right B wrong, A wrong B right) for 0/1

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "only_a": self.only_a, "only_b": self.only_b,
                "mean_a": self.mean_a, "mean_b": self.mean_b, "diff": self.diff,
                "interval": self.interval.as_dict(), "p_value": self.p_value,
                "test": self.test, "mde": self.mde,
                "discordant": list(self.discordant) if self.discordant else None}


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts."""
    from scipy.stats import binomtest

    total = a_only + b_only
    return 1.0 if total == 0 else float(binomtest(min(a_only, b_only), total, 0.5).pvalue)


def newcombe_paired(both: int, a_only: int, b_only: int, neither: int, *,
                    confidence: float = CONFIDENCE) -> Interval:
    """Newcombe (1998) method 10 for p_B - p_A on paired 0/1 data."""
    n = both + a_only + b_only + neither
    p_a, p_b = (both + a_only) / n, (both + b_only) / n
    wa = proportion_interval(both + a_only, n, confidence=confidence)
    wb = proportion_interval(both + b_only, n, confidence=confidence)
    # phi: the correlation of the two runs' scores, continuity-corrected when positive as
    # Newcombe defines it (without it, two runs agreeing on every item get the point 0 - 0);
    # 0 where a margin is empty
    denom = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    cross = float(both * neither - a_only * b_only)
    if cross > 0:
        cross = max(cross - n / 2, 0.0)
    phi = cross / math.sqrt(denom) if denom else 0.0
    d_low = math.sqrt(max(0.0, (p_b - wb.low) ** 2 - 2 * phi * (p_b - wb.low) * (wa.high - p_a)
                          + (wa.high - p_a) ** 2))
    d_high = math.sqrt(max(0.0, (wb.high - p_b) ** 2 - 2 * phi * (wb.high - p_b) * (p_a - wa.low)
                           + (p_a - wa.low) ** 2))
    diff = p_b - p_a
    return Interval(max(-1.0, diff - d_low), min(1.0, diff + d_high), NEWCOMBE, confidence)


def permutation_p(a: Any, b: Any, *, seed: int = SEED) -> float:
    import numpy as np
    from scipy.stats import permutation_test

    def statistic(x: Any, y: Any, axis: int = -1) -> Any:
        return np.mean(y - x, axis=axis)

    res = permutation_test((a, b), statistic, permutation_type="samples", vectorized=True,
                           n_resamples=PERMUTATIONS, alternative="two-sided",
                           random_state=np.random.default_rng(seed))
    return float(res.pvalue)


def _mde(sd: float, n: int, alpha: float) -> float:
    from scipy.stats import norm

    return (z_value(1 - alpha) + float(norm.ppf(POWER))) * sd / math.sqrt(n)


def paired_comparison(a: ItemScores, b: ItemScores, *, alpha: float = 1 - CONFIDENCE
                      ) -> Paired | None:
    """The paired test of B against A on the items both scored; None when they share none."""
    import numpy as np

    common = [k for k in a.scores if k in b.scores]
    only_a, only_b = len(a.scores) - len(common), len(b.scores) - len(common)
    if not common:
        return None
    xa = np.array([a.scores[k] for k in common])
    xb = np.array([b.scores[k] for k in common])
    n, diffs = len(common), xb - xa
    confidence = 1 - alpha
    if is_binary(xa.tolist()) and is_binary(xb.tolist()):
        both = int(np.sum((xa == 1) & (xb == 1)))
        a_only = int(np.sum((xa == 1) & (xb == 0)))
        b_only = int(np.sum((xa == 0) & (xb == 1)))
        neither = n - both - a_only - b_only
        interval = newcombe_paired(both, a_only, b_only, neither, confidence=confidence)
        p, test, discordant = mcnemar_exact(a_only, b_only), MCNEMAR, (a_only, b_only)
        sd = float(np.std(diffs, ddof=1)) if n > 1 else 0.0
        if sd == 0.0:  # no discordant pair: the spread of two independent shares bounds it
            pa, pb = float(xa.mean()), float(xb.mean())
            sd = math.sqrt(pa * (1 - pa) + pb * (1 - pb)) or math.sqrt(0.5)
    else:
        means = bootstrap_means(diffs, 2000, SEED)
        tail = alpha / 2 * 100
        low, high = np.percentile(means, [tail, 100 - tail])
        interval = Interval(float(low), float(high), f"paired {BOOTSTRAP}", confidence)
        # one pair shows nothing (and scipy's permutation test refuses fewer than two)
        p = permutation_p(xa, xb) if n > 1 else 1.0
        test, discordant = PERMUTATION, None
        sd = float(np.std(diffs, ddof=1)) if n > 1 else 0.0
    return Paired(n=n, only_a=only_a, only_b=only_b, mean_a=float(xa.mean()),
                  mean_b=float(xb.mean()), diff=float(diffs.mean()), interval=interval,
                  p_value=p, test=test, mde=_mde(sd, n, alpha), discordant=discordant)
