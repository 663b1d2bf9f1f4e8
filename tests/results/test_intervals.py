"""Which interval a task's scores get, and each one's edges: clustered standard errors (at
exactly two clusters, clamped to 0..1 for shares), Wilson for 0/1 scores, the bootstrap for the
rest, each at the confidence asked; what counts as a proportion; Holm's cap at 1. The
references are the definitions (numpy, scipy's normal quantile), not the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from hpceval.results.stats import (
    BOOTSTRAP,
    CLUSTERED,
    HARNESS_STDERR,
    Interval,
    bootstrap_interval,
    bootstrap_means,
    clustered_se,
    holm,
    interval_for_scores,
    interval_for_summary,
    is_binary,
    is_proportion,
    proportion_interval,
)


def cr1(scores: list[float], clusters: list[str]) -> float:
    mean = sum(scores) / len(scores)
    sums: dict[str, float] = {}
    for s, g in zip(scores, clusters, strict=True):
        sums[g] = sums.get(g, 0.0) + s - mean
    groups = len(sums)
    return math.sqrt(groups / (groups - 1) * sum(v * v for v in sums.values())) / len(scores)


def test_two_clusters_are_enough_for_a_clustered_interval() -> None:
    scores = [0.2, 0.4, 0.9, 0.7, 0.1, 0.6]
    clusters = ["a", "a", "a", "b", "b", "b"]
    got = interval_for_scores(scores, clusters, confidence=0.9)
    half = float(norm.ppf(0.95)) * cr1(scores, clusters)
    mean = sum(scores) / 6
    assert got == Interval(pytest.approx(mean - half), pytest.approx(mean + half),  # type: ignore[arg-type]
                           CLUSTERED, 0.9)
    assert clustered_se(scores, clusters) == pytest.approx(cr1(scores, clusters))
    with pytest.raises(ValueError, match=r"^clustered standard errors need at least 2 clusters$"):
        clustered_se(scores, ["a"] * 6)
    with pytest.raises(ValueError):  # one cluster label short: never silently truncated
        clustered_se(scores, clusters[:-1])


def test_a_clustered_share_stays_inside_0_and_1() -> None:
    high = interval_for_scores([1.0] * 9 + [0.0], ["a"] * 5 + ["b"] * 5)
    assert high is not None and high.high == 1.0 and 0.0 < high.low < 0.9
    low = interval_for_scores([0.0] * 9 + [1.0], ["a"] * 5 + ["b"] * 5)
    assert low is not None and low.low == 0.0 and 0.1 < low.high < 1.0
    # not a share: no clamp
    wide = interval_for_scores([3.0, -2.0, 5.0, 4.0], ["a", "a", "b", "b"])
    assert wide is not None and wide.low < 0.0 and wide.high > 1.0


def test_one_cluster_or_none_falls_back_to_wilson_or_the_bootstrap() -> None:
    assert interval_for_scores([]) is None
    assert interval_for_scores([1.0]) == proportion_interval(1, 1)
    shares = [1.0, 0.0, 1.0, 1.0]
    assert interval_for_scores(shares, ["a"] * 4, confidence=0.8) == \
        proportion_interval(3, 4, confidence=0.8)
    rng = np.random.default_rng(5)
    values = rng.normal(2.0, 1.0, 400).tolist()
    got = interval_for_scores(values, confidence=0.9)
    assert got == bootstrap_interval(values, confidence=0.9)
    assert got is not None and got.method == BOOTSTRAP and got.confidence == 0.9
    mean, half = float(np.mean(values)), float(norm.ppf(0.95)) * float(np.std(values)) / 20
    assert got.low == pytest.approx(mean - half, abs=0.1 * half)
    assert got.high == pytest.approx(mean + half, abs=0.1 * half)


def test_the_bootstrap_interval_is_the_percentile_interval_of_its_means() -> None:
    from hpceval.results.stats import BOOTSTRAP_RESAMPLES, SEED

    values = np.random.default_rng(4).normal(0.0, 1.0, 60).tolist()
    got = bootstrap_interval(values, confidence=0.9)
    means = bootstrap_means(np.asarray(values), BOOTSTRAP_RESAMPLES, SEED)
    assert (got.low, got.high) == tuple(np.percentile(means, [5.0, 95.0]))


def test_bootstrap_means_are_drawn_in_chunks_as_one_draw_would_be() -> None:
    data = np.arange(5000, dtype=float)  # 2,000,000 // 5000 = 400 resamples a chunk
    means = bootstrap_means(data, 1001, 11)
    assert means.shape == (1001,)
    reference = data[np.random.default_rng(11).integers(0, 5000, (1001, 5000))].mean(axis=1)
    assert np.allclose(means, reference)
    assert not np.allclose(bootstrap_means(data, 1001, 12), means)


def test_a_summary_interval_keeps_its_confidence() -> None:
    assert interval_for_summary("acc", 0.5, None, 10, confidence=0.9) == \
        proportion_interval(5, 10, confidence=0.9)
    got = interval_for_summary("f1", 0.5, 0.1, None, confidence=0.9)
    half = float(norm.ppf(0.95)) * 0.1
    assert got == Interval(pytest.approx(0.5 - half), pytest.approx(0.5 + half),  # type: ignore[arg-type]
                           HARNESS_STDERR, 0.9)


def test_what_counts_as_binary_and_as_a_proportion() -> None:
    assert not is_binary([]) and not is_binary([0.5]) and is_binary([0.0, 1.0])
    assert is_proportion("acc", 1.0, 10) and is_proportion("acc", 0.0, 10)
    assert not is_proportion("f1", 0.5, 10)        # not a share metric, whatever its n
    assert not is_proportion("acc", 0.5, 0) and not is_proportion("acc", 0.5, None)
    assert not is_proportion("acc", 1.5, 10) and not is_proportion("acc", -0.1, 10)
    assert is_proportion("acc", (500 + 0.0005) / 1000, 1000)  # within 1e-6 x n of a whole k
    assert not is_proportion("acc", (500 + 0.3) / 1000, 1000)
    assert not is_proportion("acc", 1.5e-6, 1)  # the tolerance is at least 1e-6, not 2e-6


def test_holm_caps_adjusted_p_values_at_one() -> None:
    assert holm([0.6, 0.7]) == [1.0, 1.0]
    assert holm([]) == []


def test_an_interval_as_json() -> None:
    assert Interval(0.1, 0.2, "Wilson", 0.9).as_dict() == {
        "low": 0.1, "high": 0.2, "method": "Wilson", "confidence": 0.9}
