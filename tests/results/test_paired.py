"""The paired comparison's own arithmetic, number by number: which items count, the 0/1 path
(Newcombe interval, McNemar p, discordant pairs), the continuous path (bootstrap interval,
permutation p), the minimum detectable effect, and what is read from sample files. The
references are computed here from their definitions (scipy's normal quantiles, numpy's standard
deviation), not taken from the code under test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from hpceval.results.paired import (
    MCNEMAR,
    PERMUTATION,
    ItemScores,
    mcnemar_exact,
    newcombe_paired,
    paired_comparison,
    permutation_p,
    read_item_scores,
)


def scores(values: list[float], start: int = 0) -> ItemScores:
    return ItemScores({("t", start + i): v for i, v in enumerate(values)}, files=1)


def mde(sd: float, n: int, alpha: float = 0.05) -> float:
    """Two-sided alpha, power 0.8: (z_{1-alpha/2} + z_{0.8}) sd / sqrt(n)."""
    return (float(norm.ppf(1 - alpha / 2)) + float(norm.ppf(0.8))) * sd / math.sqrt(n)


def table_scores(both: int, a_only: int, b_only: int, neither: int
                 ) -> tuple[list[float], list[float]]:
    a = [1.0] * both + [1.0] * a_only + [0.0] * b_only + [0.0] * neither
    b = [1.0] * both + [0.0] * a_only + [1.0] * b_only + [0.0] * neither
    return a, b


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_binary_scores_count_each_cell_of_the_table(alpha: float) -> None:
    a, b = table_scores(20, 3, 9, 8)
    result = paired_comparison(scores(a), scores(b), alpha=alpha)
    assert result is not None and result.test == MCNEMAR
    assert (result.n, result.only_a, result.only_b, result.discordant) == (40, 0, 0, (3, 9))
    assert result.interval == newcombe_paired(20, 3, 9, 8, confidence=1 - alpha)
    assert result.interval.confidence == 1 - alpha
    assert result.p_value == mcnemar_exact(3, 9)
    assert (result.mean_a, result.mean_b) == (23 / 40, 29 / 40)
    assert result.diff == pytest.approx(6 / 40)
    diffs = np.array(b) - np.array(a)
    assert result.mde == pytest.approx(mde(float(np.std(diffs, ddof=1)), 40, alpha))


def test_without_discordant_pairs_the_mde_uses_the_two_shares_spread() -> None:
    a = [1.0] * 7 + [0.0] * 3
    result = paired_comparison(scores(a), scores(a))
    assert result is not None and result.diff == 0 and result.discordant == (0, 0)
    assert result.mde == pytest.approx(mde(math.sqrt(2 * 0.7 * 0.3), 10))
    perfect = paired_comparison(scores([1.0] * 10), scores([1.0] * 10))
    assert perfect is not None and perfect.mde == pytest.approx(mde(math.sqrt(0.5), 10))


def test_one_item_in_common_has_no_spread_of_its_own() -> None:
    result = paired_comparison(scores([1.0]), scores([0.0]))
    assert result is not None and result.n == 1 and result.discordant == (1, 0)
    assert result.mde == pytest.approx(mde(math.sqrt(1.0 * 0.0 + 0.0 * 1.0) or math.sqrt(0.5), 1))


def test_only_the_items_both_scored_are_compared_and_the_rest_counted() -> None:
    a = scores([1.0, 0.0, 1.0, 1.0, 0.0])           # items 0-4
    b = scores([0.0, 1.0, 1.0, 1.0, 1.0, 0.0], 2)   # items 2-7
    result = paired_comparison(a, b)
    assert result is not None and (result.n, result.only_a, result.only_b) == (3, 2, 3)
    assert (result.mean_a, result.mean_b) == (2 / 3, 2 / 3)
    assert paired_comparison(scores([1.0]), scores([1.0], 5)) is None


def test_scores_that_are_not_all_0_or_1_take_the_continuous_path() -> None:
    a = [1.0, 0.0] * 10
    b = [0.5] * 20  # B's scores are not 0/1, A's are: both must be for McNemar
    for x, y in ((a, b), (b, a)):
        result = paired_comparison(scores(x), scores(y))
        assert result is not None and result.test == PERMUTATION and result.discordant is None


def test_continuous_scores_get_a_bootstrap_interval_and_a_permutation_p() -> None:
    rng = np.random.default_rng(7)
    a = rng.uniform(0, 1, 200)
    b = a + 0.05 + rng.normal(0, 0.1, 200)
    result = paired_comparison(scores(a.tolist()), scores(b.tolist()))
    assert result is not None and result.test == PERMUTATION
    diffs = b - a
    mean, sd = float(diffs.mean()), float(np.std(diffs, ddof=1))
    assert (result.mean_a, result.mean_b) == pytest.approx((a.mean(), b.mean()))
    assert result.diff == pytest.approx(mean)
    # the percentile bootstrap of a mean of 200 is close to the normal interval
    half = float(norm.ppf(0.975)) * sd / math.sqrt(200)
    assert result.interval.low == pytest.approx(mean - half, abs=0.1 * half)
    assert result.interval.high == pytest.approx(mean + half, abs=0.1 * half)
    assert result.interval.method == "paired bootstrap" and result.interval.confidence == 0.95
    assert result.p_value == permutation_p(a, b) and result.p_value < 0.001
    assert result.mde == pytest.approx(mde(sd, 200))
    narrower = paired_comparison(scores(a.tolist()), scores(b.tolist()), alpha=0.2)
    assert narrower is not None and narrower.interval.confidence == 0.8
    assert result.interval.low < narrower.interval.low < narrower.interval.high \
        < result.interval.high


def test_the_permutation_p_is_seeded_and_two_sided() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 1, 40)
    b = a + rng.normal(0.02, 0.1, 40)  # 2^40 sign patterns: sampled, not enumerated
    first = permutation_p(a, b)
    assert permutation_p(a, b) == first  # the same every time: a report does not flicker
    assert permutation_p(b, a) == pytest.approx(first, abs=0.02)  # two-sided: symmetric
    assert permutation_p(a, b, seed=1) != first


def _sample_file(task_dir: Path, subtask: str, records: list[object],
                 raw_lines: tuple[bytes, ...] = ()) -> None:
    folder = task_dir / "harness" / "m"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"samples_{subtask}_2026-12-01T10-00-00.jsonl"
    with path.open("wb") as handle:
        for record in records:
            handle.write(json.dumps(record).encode() + b"\n")
        for line in raw_lines:
            handle.write(line + b"\n")


def test_sample_files_give_one_score_per_item_and_count_unparsable_answers(
        tmp_path: Path) -> None:
    _sample_file(tmp_path, "mmlu_anatomy", [
        {"doc_id": 0, "acc": True, "filtered_resps": ["[invalid]"]},
        {"doc_id": 1, "acc": False, "filtered_resps": ["  "]},
        {"doc_id": 2, "acc": 1, "filtered_resps": ["B"]},
        {"doc_id": 3, "acc": 0.25, "filtered_resps": ["[invalid]", "x"]},
        {"doc_id": 4, "acc": float("inf")},           # not a score
        {"doc_id": 5, "acc": "1"},                     # not a score
        {"doc_id": 2, "acc": 0, "filtered_resps": [""]},  # a repeat: the first counts
        {"doc_id": 6, "acc": 1, "filtered_resps": "[invalid]"},
        {"doc_id": 7, "acc": 1, "filtered_resps": [5]},
    ], raw_lines=(b'{"doc_id": 8, "acc": 1, "note": "caf\xe9"}', b'{"doc_id": 9, "ac',
                  b'[1, 2]'))
    _sample_file(tmp_path, "mmlu_virology", [{"doc_id": 0, "acc": 0}])
    seen: list[tuple[str, int]] = []
    read = read_item_scores(str(tmp_path), "acc",
                            on_line=lambda rec, rel, n: seen.append((Path(rel).name, n)))
    assert read.files == 2
    assert read.scores == {("mmlu_anatomy", 0): 1.0, ("mmlu_anatomy", 1): 0.0,
                           ("mmlu_anatomy", 2): 1.0, ("mmlu_anatomy", 3): 0.25,
                           ("mmlu_anatomy", 6): 1.0, ("mmlu_anatomy", 7): 1.0,
                           ("mmlu_anatomy", 8): 1.0, ("mmlu_virology", 0): 0.0}
    assert read.unparsable == 2  # "[invalid]" and a blank answer, each a one-answer list
    assert len(seen) == 13 and seen[-1] == ("samples_mmlu_virology_2026-12-01T10-00-00.jsonl", 1)


def test_a_filter_keeps_its_own_records_and_those_that_name_none(tmp_path: Path) -> None:
    _sample_file(tmp_path, "gsm8k", [
        {"doc_id": 0, "exact_match": 1, "filter": "strict-match"},
        {"doc_id": 0, "exact_match": 0, "filter": "flexible-extract"},
        {"doc_id": 1, "exact_match": 0, "filter": "flexible-extract"},
        {"doc_id": 2, "exact_match": 1},
    ])
    strict = read_item_scores(str(tmp_path), "exact_match", "strict-match")
    assert strict.scores == {("gsm8k", 0): 1.0, ("gsm8k", 2): 1.0}
    loose = read_item_scores(str(tmp_path), "exact_match", "flexible-extract")
    assert loose.scores == {("gsm8k", 0): 0.0, ("gsm8k", 1): 0.0, ("gsm8k", 2): 1.0}


sm_prop = pytest.importorskip("statsmodels.stats.proportion")


def newcombe_reference(both: int, a_only: int, b_only: int, neither: int,
                       confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe (1998) method 10 written out from the paper with statsmodels' Wilson limits:
    phi continuity-corrected when positive, 0 where a margin is empty."""
    n = both + a_only + b_only + neither
    pa, pb = (both + a_only) / n, (both + b_only) / n
    la, ua = sm_prop.proportion_confint(both + a_only, n, alpha=1 - confidence, method="wilson")
    lb, ub = sm_prop.proportion_confint(both + b_only, n, alpha=1 - confidence, method="wilson")
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    c = both * neither - a_only * b_only
    c = max(c - n / 2, 0.0) if c > 0 else c
    phi = c / math.sqrt(margins) if margins else 0.0
    d = pb - pa
    dl, du = (pb - lb, ua - pa), (ub - pb, pa - la)
    low = d - math.sqrt(max(0.0, dl[0] ** 2 - 2 * phi * dl[0] * dl[1] + dl[1] ** 2))
    high = d + math.sqrt(max(0.0, du[0] ** 2 - 2 * phi * du[0] * du[1] + du[1] ** 2))
    return max(-1.0, low), min(1.0, high)


@pytest.mark.parametrize("table", [(20, 3, 9, 8), (60, 0, 8, 32), (2, 1, 1, 1), (5, 0, 3, 0),
                                   (3, 7, 2, 9), (30, 1, 2, 3)])
@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_newcombe_paired_equals_the_papers_formula(table: tuple[int, int, int, int],
                                                    confidence: float) -> None:
    ours = newcombe_paired(*table, confidence=confidence)
    low, high = newcombe_reference(*table, confidence=confidence)
    assert (ours.low, ours.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))
    assert ours.confidence == confidence


def test_the_continuous_path_with_two_items_and_with_one() -> None:
    two = paired_comparison(scores([0.2, 0.5]), scores([0.4, 0.6]))
    assert two is not None and two.mde == pytest.approx(mde(float(np.std([0.2, 0.1], ddof=1)), 2))
    # one item in common: nothing to test (scipy's permutation test raised ValueError here)
    one = paired_comparison(scores([0.2]), scores([0.4]))
    assert one is not None and (one.p_value, one.mde, one.test) == (1.0, 0.0, PERMUTATION)
    assert one.diff == pytest.approx(0.2)


def test_the_bootstrap_interval_is_the_seeded_percentile_interval_of_2000_means() -> None:
    from hpceval.results.stats import SEED, bootstrap_means

    rng = np.random.default_rng(9)
    a, b = rng.uniform(0, 1, 50), rng.uniform(0, 1, 50)
    result = paired_comparison(scores(a.tolist()), scores(b.tolist()), alpha=0.1)
    means = bootstrap_means(b - a, 2000, SEED)
    low, high = np.percentile(means, [5.0, 95.0])
    assert result is not None and (result.interval.low, result.interval.high) == (low, high)


def test_a_paired_result_as_json() -> None:
    a, b = table_scores(20, 3, 9, 8)
    result = paired_comparison(scores(a), scores(b))
    assert result is not None
    assert result.as_dict() == {
        "n": 40, "only_a": 0, "only_b": 0, "mean_a": result.mean_a, "mean_b": result.mean_b,
        "diff": result.diff, "interval": result.interval.as_dict(), "p_value": result.p_value,
        "test": MCNEMAR, "mde": result.mde, "discordant": [3, 9]}
    continuous = paired_comparison(scores([0.2, 0.5]), scores([0.4, 0.6]))
    assert continuous is not None and continuous.as_dict()["discordant"] is None


def test_the_line_callback_sees_each_decoded_record_until_it_says_stop(tmp_path: Path) -> None:
    _sample_file(tmp_path, "t", [{"doc_id": 0, "acc": 1}, {"doc_id": 1, "acc": 0}],
                 raw_lines=(b'{"doc_id": 2, "ac',))
    seen: list[object] = []
    read_item_scores(str(tmp_path), "acc", on_line=lambda rec, rel, n: seen.append(rec))
    assert seen == [{"doc_id": 0, "acc": 1}, {"doc_id": 1, "acc": 0}, None]
    first: list[object] = []
    read = read_item_scores(str(tmp_path), "acc",
                            on_line=lambda rec, rel, n: first.append(rec) or False)
    assert first == [{"doc_id": 0, "acc": 1}] and len(read.scores) == 2
