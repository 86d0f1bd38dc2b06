"""The deterministic draws every generator uses."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from rlm.fixtures.draws import cumulative, index, lognormal_latencies, pick, weighted


def test_index_and_pick_stay_in_range_and_cover_it() -> None:
    r = random.Random(1)
    seen = {index(r, 5) for _ in range(500)}
    assert seen == {0, 1, 2, 3, 4}
    assert pick(random.Random(2), ["only"]) == "only"
    with pytest.raises(ValueError):
        index(r, 0)


def test_same_seed_same_draws_from_random_only() -> None:
    # index() is int(random() * n): pinned so a change of algorithm shows up here.
    r = random.Random(7)
    expected = [int(random.Random(7).random() * 10)]
    assert [index(r, 10)] == expected


def test_weighted_follows_the_weights() -> None:
    edges = cumulative([1.0, 3.0])
    assert edges == [0.25, 1.0]
    r = random.Random(3)
    draws = [weighted(r, edges) for _ in range(4000)]
    assert 0.2 < draws.count(0) / len(draws) < 0.3
    with pytest.raises(ValueError):
        cumulative([0.0, 0.0])


def test_lognormal_latencies_have_the_asked_median_and_are_reproducible() -> None:
    a = lognormal_latencies(2001, median=0.5, sigma=0.5, seed=4)
    assert a == lognormal_latencies(2001, median=0.5, sigma=0.5, seed=4)
    assert a != lognormal_latencies(2001, median=0.5, sigma=0.5, seed=5)
    assert statistics.median(a) == pytest.approx(0.5, rel=0.08)
    logs = [math.log(x) for x in a]
    assert statistics.stdev(logs) == pytest.approx(0.5, rel=0.1)
    capped = lognormal_latencies(200, median=1.0, sigma=2.0, seed=1, cap=3.0)
    assert max(capped) == 3.0 and min(capped) > 0
