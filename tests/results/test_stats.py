"""hpceval's intervals and tests against statsmodels' own implementations and published values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpceval.results.paired import (
    ItemScores,
    mcnemar_exact,
    newcombe_paired,
    paired_comparison,
    permutation_p,
)
from hpceval.results.stats import (
    CLOPPER_PEARSON,
    CLUSTERED,
    HARNESS_STDERR,
    WILSON,
    clustered_se,
    holm,
    interval_for_scores,
    interval_for_summary,
    proportion_interval,
)

sm_proportion = pytest.importorskip("statsmodels.stats.proportion")


@pytest.mark.parametrize(("k", "n"), [(0, 10), (2, 10), (10, 10), (37, 50), (400, 500)])
def test_wilson_and_clopper_pearson_equal_statsmodels(k: int, n: int) -> None:
    for method, theirs in ((WILSON, "wilson"), (CLOPPER_PEARSON, "beta")):
        ours = proportion_interval(k, n, method=method)
        low, high = sm_proportion.proportion_confint(k, n, alpha=0.05, method=theirs)
        assert math.isclose(ours.low, low, abs_tol=1e-9), (method, k, n)
        assert math.isclose(ours.high, high, abs_tol=1e-9), (method, k, n)
        assert ours.method == method


def test_the_issue_s_two_wrong_intervals_are_fixed() -> None:
    """0/10 was '0 - 0' and 2/10 '-0.061 - 0.461' (value +- 1.96 x stderr). Wilson's score
    interval by hand: 0/10 -> 0 to z^2/(n + z^2) = 0.2775; 2/10 -> 0.0567 to 0.5098."""
    zero = interval_for_summary("exact_match", 0.0, 0.0, 10)
    two = interval_for_summary("exact_match", 0.2, math.sqrt(0.2 * 0.8 / 9), 10)
    assert zero is not None and two is not None
    assert (zero.method, two.method) == (WILSON, WILSON)
    assert zero.low == 0.0 and round(zero.high, 4) == 0.2775
    assert (round(two.low, 4), round(two.high, 4)) == (0.0567, 0.5098)
    # a metric that is not a share keeps the harness's stderr, and says so
    other = interval_for_summary("bleu", 21.5, 0.5, 10)
    assert other is not None and other.method == HARNESS_STDERR
    assert math.isclose(other.high - other.low, 2 * 1.959964 * 0.5, rel_tol=1e-5)


def test_clustered_se_equals_statsmodels_ols_cluster() -> None:
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(7), [5, 9, 3, 12, 6, 8, 4])
    y = (rng.random(len(groups)) < 0.3 + 0.08 * groups).astype(float)
    fit = sm.OLS(y, np.ones(len(y))).fit(cov_type="cluster", cov_kwds={"groups": groups})
    assert math.isclose(clustered_se(y.tolist(), groups.tolist()), float(fit.bse[0]),
                        rel_tol=1e-9)
    interval = interval_for_scores(y.tolist(), groups.tolist())
    assert interval is not None and interval.method == CLUSTERED


def test_holm_equals_statsmodels() -> None:
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    p = [0.01, 0.04, 0.03, 0.2, 0.0001, 0.5]
    theirs = multitest.multipletests(p, alpha=0.05, method="holm")[1]
    assert np.allclose(holm(p), theirs)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 6), (5, 5), (12, 3), (0, 9)])
def test_mcnemar_exact_equals_statsmodels(b: int, c: int) -> None:
    tables = pytest.importorskip("statsmodels.stats.contingency_tables")
    theirs = tables.mcnemar([[20, b], [c, 30]], exact=True).pvalue
    assert math.isclose(mcnemar_exact(b, c), min(1.0, float(theirs)), rel_tol=1e-12)


def test_newcombe_with_uncorrelated_runs_equals_statsmodels_unpaired_newcombe() -> None:
    """With phi = 0 (both x neither == a_only x b_only) Newcombe's paired method 10 is his
    unpaired hybrid score interval, which statsmodels implements."""
    sm_prop = pytest.importorskip("statsmodels.stats.proportion")
    ours = newcombe_paired(6, 2, 3, 1)  # p_A = 8/12, p_B = 9/12
    low, high = sm_prop.confint_proportions_2indep(9, 12, 8, 12, method="newcomb",
                                                   compare="diff")
    assert math.isclose(ours.low, low, abs_tol=1e-9) and math.isclose(ours.high, high,
                                                                      abs_tol=1e-9)


def test_a_paired_difference_without_discordant_pairs_is_not_a_point() -> None:
    same = ItemScores({("t", i): float(i % 2) for i in range(20)}, files=1)
    result = paired_comparison(same, same)
    assert result is not None and result.diff == 0 and result.p_value == 1.0
    assert result.interval.low < 0 < result.interval.high and result.mde > 0


def test_permutation_test_is_exact_for_small_n() -> None:
    a = np.zeros(10)
    b = np.arange(1, 11, dtype=float) / 10  # every difference positive
    # sign flips: 2^10 arrangements, the observed one and its mirror are the extremes
    assert math.isclose(permutation_p(a, b), 2 / 1024, rel_tol=1e-9)


def test_paired_beats_marginal_on_the_same_items() -> None:
    """B fixes 8 items A got wrong and breaks none, on 100 shared items: McNemar calls it
    (p = 2/256) although the two marginal Wilson intervals overlap."""
    a = ItemScores({("t", i): 1.0 if i < 60 else 0.0 for i in range(100)}, files=1)
    b = ItemScores({("t", i): 1.0 if i < 68 else 0.0 for i in range(100)}, files=1)
    result = paired_comparison(a, b)
    assert result is not None and result.test == "McNemar exact"
    assert result.discordant == (0, 8) and math.isclose(result.p_value, 2 / 256)
    wa, wb = proportion_interval(60, 100), proportion_interval(68, 100)
    assert wa.high > wb.low  # the marginal intervals overlap
    assert result.interval.low > 0


def test_items_of_one_run_only_are_counted() -> None:
    a = ItemScores({("t", i): 1.0 for i in range(10)}, files=1)
    b = ItemScores({("t", i): 1.0 for i in range(3, 15)}, files=1)
    result = paired_comparison(a, b)
    assert result is not None and (result.n, result.only_a, result.only_b) == (7, 3, 5)


@pytest.mark.parametrize("table", [(20, 3, 9, 8), (60, 0, 8, 32), (10, 5, 1, 4), (3, 7, 2, 9)])
def test_newcombe_paired_swapping_a_and_b_mirrors_the_interval(
        table: tuple[int, int, int, int]) -> None:
    """Method 10 is antisymmetric in A and B (phi is symmetric): the interval of A - B is the
    interval of B - A mirrored, so a slip on one side of the formula (the phi term's sign in
    the upper half-width, say) breaks it for any correlated table."""
    both, a_only, b_only, neither = table
    forward = newcombe_paired(both, a_only, b_only, neither)
    backward = newcombe_paired(both, b_only, a_only, neither)
    assert math.isclose(forward.low, -backward.high, abs_tol=1e-12)
    assert math.isclose(forward.high, -backward.low, abs_tol=1e-12)


@pytest.mark.parametrize(("table", "correlation"), [
    ((20, 3, 9, 8), "positive"), ((60, 0, 8, 32), "positive"), ((10, 5, 1, 4), "positive"),
    ((3, 9, 7, 2), "negative"),
])
def test_newcombe_paired_narrows_with_positive_correlation_at_both_ends(
        table: tuple[int, int, int, int], correlation: str) -> None:
    """Two checkpoints scored on the same items agree more than chance: the paired interval
    lies strictly inside the unpaired one (statsmodels' Newcombe hybrid score, phi = 0) at
    BOTH ends, and strictly outside it when the runs disagree more than chance. A wrong sign
    of the phi term in either half-width widens that end and reads a clear regression as
    inconclusive."""
    both, a_only, b_only, neither = table
    n = sum(table)
    ours = newcombe_paired(both, a_only, b_only, neither)
    low, high = sm_proportion.confint_proportions_2indep(
        both + b_only, n, both + a_only, n, method="newcomb", compare="diff")
    if correlation == "positive":
        assert low < ours.low and ours.high < high, (ours, (low, high))
    else:
        assert ours.low < low and high < ours.high, (ours, (low, high))


def test_holm_adjusted_p_values_never_fall_with_rank() -> None:
    """Holm's step-down keeps the running maximum: 3 x 0.01 = 0.03 bounds the next one's
    2 x 0.011 = 0.022, which alone would let the second task pass at a level the first
    does not (statsmodels gives the same)."""
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    for p in ([0.01, 0.011, 0.5], [0.04, 0.001, 0.0105, 0.3, 0.012]):
        theirs = multitest.multipletests(p, alpha=0.05, method="holm")[1]
        assert np.allclose(holm(p), theirs), (holm(p), theirs)
    assert holm([0.01, 0.011, 0.5]) == pytest.approx([0.03, 0.03, 0.5])
