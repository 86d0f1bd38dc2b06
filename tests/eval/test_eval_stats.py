"""The bootstrap interval and percentiles: deterministic, and right where the answer is known."""

from __future__ import annotations

import random

import pytest

from rlm.eval.stats import bootstrap_mean, paired_difference, percentile


def test_the_same_scores_give_the_same_interval_every_time() -> None:
    scores = [1.0] * 30 + [0.0] * 30
    first = bootstrap_mean(scores, seed=3)
    assert first == bootstrap_mean(list(scores), seed=3)
    assert first.mean == 0.5
    assert first.low is not None and first.high is not None
    assert first.low < 0.5 < first.high
    # The binomial standard error is 0.065: a 95 % interval is about ±0.13 wide.
    assert first.high - first.low == pytest.approx(0.25, abs=0.04)


def test_the_interval_covers_the_true_mean_about_95_times_in_100() -> None:
    r = random.Random(11)
    covered = 0
    for trial in range(200):
        sample = [float(r.random() < 0.7) for _ in range(80)]
        found = bootstrap_mean(sample, seed=trial, resamples=400)
        assert found.low is not None and found.high is not None
        covered += found.low <= 0.7 <= found.high
    assert 176 <= covered <= 200  # 95 % of 200 is 190; a few either way is chance


def test_constant_and_empty_scores() -> None:
    same = bootstrap_mean([1.0] * 10)
    assert (same.mean, same.low, same.high) == (1.0, 1.0, 1.0)
    assert bootstrap_mean([]).to_list() == [None, None]


def test_a_paired_difference_is_the_mean_of_differences() -> None:
    a, b = [0.0, 1.0, 0.0, 1.0] * 10, [1.0, 1.0, 1.0, 1.0] * 10
    found = paired_difference(a, b, seed=1)
    assert found.mean == 0.5
    with pytest.raises(ValueError):
        paired_difference([1.0], [])


def test_percentiles_interpolate_between_ranks() -> None:
    values = sorted([1.0, 2.0, 3.0, 4.0])
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile([5.0], 95) == 5.0 and percentile([], 50) is None
