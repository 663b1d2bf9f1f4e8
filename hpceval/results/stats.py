"""The statistics behind every interval and comparison hpceval shows (the maths is scipy's).

One interval rule, in this order (``interval_for_scores`` / ``interval_for_summary``):

* per-sample scores from several groups (a task's subtasks: one sample file each) -> a
  cluster-robust standard error of the mean (the CR1 estimator statsmodels uses for an OLS on a
  constant with ``cov_type="cluster"``): items of one subtask are not independent draws;
* per-sample 0/1 scores, or a proportion metric with its n -> Wilson's score interval
  (``scipy.stats.binomtest(...).proportion_ci``): never a point at 0/n, never below 0 or above 1;
* other per-sample scores -> a percentile bootstrap of the mean (seeded, so a page is
  reproducible);
* a summary only (no sample files) of a non-proportion metric -> value +- z x the harness's
  stderr (the normal approximation the harness itself assumes).

Every ``Interval`` carries the name of its method; every table prints it next to the numbers.
Paired tests (McNemar, permutation) live in ``results.paired``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
SEED = 20261201  # fixed: the same files give the same page
# Metric names that are a share of items scored 1 (lm-eval, simple-evals, eval-factory spellings).
PROPORTION_METRICS = frozenset({
    "acc", "acc_norm", "exact_match", "pass@1", "accuracy", "em", "score", "correct",
    "prompt_level_strict_acc", "prompt_level_loose_acc", "inst_level_strict_acc",
    "inst_level_loose_acc", "mc1", "mc2_binary", "pass_at_1", "symbolic_correct"})

WILSON = "Wilson"
CLOPPER_PEARSON = "Clopper-Pearson"
BOOTSTRAP = "bootstrap"
CLUSTERED = "clustered SE"
HARNESS_STDERR = "harness stderr (normal)"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str  # one of the names above, shown next to the numbers
    confidence: float = CONFIDENCE

    def text(self) -> str:
        return f"{self.low:.3g}–{self.high:.3g} ({self.method})"

    def as_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "method": self.method,
                "confidence": self.confidence}


@functools.lru_cache(maxsize=64)
def z_value(confidence: float = CONFIDENCE) -> float:
    """The two-sided normal quantile (cached: scipy's ppf costs about 0.7 ms a call)."""
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def is_binary(scores: Sequence[float]) -> bool:
    return bool(scores) and all(s in (0.0, 1.0) for s in scores)


def is_proportion(metric: str, value: float, n: int | None) -> bool:
    """A proportion metric whose value is k/n for a whole k (so k can be recovered)."""
    if metric not in PROPORTION_METRICS or not n or not 0.0 <= value <= 1.0:
        return False
    return abs(value * n - round(value * n)) < 1e-6 * max(1, n)


@functools.lru_cache(maxsize=4096)
def proportion_interval(successes: int, n: int, *, method: str = WILSON,
                        confidence: float = CONFIDENCE) -> Interval:
    """scipy's interval for k of n (cached: a page asks for the same few many times)."""
    from scipy.stats import binomtest

    if n <= 0:
        raise ValueError("a proportion needs n >= 1")
    kind = {WILSON: "wilson", CLOPPER_PEARSON: "exact"}[method]
    # The interval does not depend on the hypothesised p; at p = k/n scipy's two-sided
    # p-value (computed eagerly, unused here) skips its binary search: 1 ms less per call.
    ci = binomtest(successes, n, p=successes / n).proportion_ci(confidence_level=confidence,
                                                               method=kind)
    return Interval(float(ci.low), float(ci.high), method, confidence)


def clustered_se(scores: Sequence[float], clusters: Sequence[Any]) -> float:
    """CR1 standard error of the mean: sqrt(G/(G-1) x sum_g (sum_i e_gi)^2) / N (statsmodels'
    small-sample factor G/(G-1) x (N-1)/(N-K), with K = 1 parameter)."""
    n = len(scores)
    mean = sum(scores) / n
    sums: dict[Any, float] = {}
    for s, g in zip(scores, clusters, strict=True):
        sums[g] = sums.get(g, 0.0) + (s - mean)
    groups = len(sums)
    if groups < 2:
        raise ValueError("clustered standard errors need at least 2 clusters")
    meat = sum(v * v for v in sums.values())
    return math.sqrt(groups / (groups - 1) * meat) / n


def bootstrap_interval(scores: Sequence[float], *, confidence: float = CONFIDENCE,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = SEED) -> Interval:
    import numpy as np

    data = np.asarray(scores, dtype=float)
    means = bootstrap_means(data, resamples, seed)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(low), float(high), BOOTSTRAP, confidence)


def bootstrap_means(data: Any, resamples: int, seed: int) -> Any:
    """Means of `resamples` resamples with replacement, drawn in chunks (bounded memory)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = len(data)
    chunk = max(1, 2_000_000 // max(n, 1))
    out = []
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        out.append(data[rng.integers(0, n, (size, n))].mean(axis=1))
    return np.concatenate(out)


def interval_for_scores(scores: Sequence[float], clusters: Sequence[Any] | None = None, *,
                        confidence: float = CONFIDENCE) -> Interval | None:
    """The interval of a mean over per-sample scores (see the module docstring for the rule)."""
    n = len(scores)
    if n == 0:
        return None
    mean = sum(scores) / n
    if clusters is not None and len(set(clusters)) >= 2:
        half = z_value(confidence) * clustered_se(scores, clusters)
        low, high = mean - half, mean + half
        if is_binary(scores):  # a share stays inside 0..1
            low, high = max(0.0, low), min(1.0, high)
        return Interval(low, high, CLUSTERED, confidence)
    if is_binary(scores):
        return proportion_interval(round(sum(scores)), n, confidence=confidence)
    return bootstrap_interval(scores, confidence=confidence)


def interval_for_summary(metric: str, value: float, stderr: float | None, n: int | None, *,
                         confidence: float = CONFIDENCE) -> Interval | None:
    """The interval from a results.json metric alone (no sample files)."""
    if n is not None and is_proportion(metric, value, n):
        return proportion_interval(round(value * n), n, confidence=confidence)
    if stderr is None or not math.isfinite(stderr):
        return None
    half = z_value(confidence) * stderr
    return Interval(value - half, value + half, HARNESS_STDERR, confidence)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
