"""Uncertainty of accuracies: the Wilson interval against published values, its coverage, the t interval over seeds,
McNemar's exact test by hand, and the paired comparison of two rows on the same examples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pe_bench.stats import (
    MCNEMAR_METHOD,
    T_METHOD,
    WILSON_METHOD,
    Interval,
    accuracy_interval,
    holm_rejected,
    mcnemar_exact,
    paired_accuracy,
    seed_interval,
    wilson_interval,
)


@pytest.mark.parametrize("solved,n,lo,hi", [
    (81, 263, 0.2553, 0.3662),  # Newcombe 1998, Statistics in Medicine 17:857, Table I (method 3)
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
])
def test_wilson_intervals_of_newcombes_table(solved, n, lo, hi):
    iv = wilson_interval(solved, n)
    assert (round(iv.lo, 4), round(iv.hi, 4)) == (lo, hi)
    assert iv.method == WILSON_METHOD and iv.n == n


def test_wilson_stays_in_0_1_and_is_exact_at_the_ends():
    assert wilson_interval(0, 400).lo == 0.0 and wilson_interval(400, 400).hi == 1.0
    assert 0.99 < wilson_interval(400, 400).lo < 1.0 and 0.0 < wilson_interval(0, 400).hi < 0.01


def test_wilson_covers_the_true_proportion_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    for p in (0.05, 0.5, 0.9):
        draws = rng.binomial(400, p, size=4000)
        cover = np.mean([wilson_interval(int(k), 400).lo <= p <= wilson_interval(int(k), 400).hi for k in draws])
        assert 0.93 < cover < 0.97, (p, cover)


def test_400_examples_resolve_ten_points_at_fifty_percent():
    """The held-out sets' size (docs/tasks.md): at 50 % the interval is ±4.9 points, so 45 % and 55 % (a 10-point
    difference) have disjoint intervals."""
    a, b = wilson_interval(180, 400), wilson_interval(220, 400)
    assert round(100 * (wilson_interval(200, 400).hi - 0.5), 1) == 4.9
    assert a.hi < b.lo


def test_one_seed_is_wilson_and_several_are_t_over_the_per_seed_accuracies():
    assert accuracy_interval([(30, 40)]) == wilson_interval(30, 40)
    iv = accuracy_interval([(30, 40), (36, 40), (33, 40)])
    t = seed_interval([0.75, 0.9, 0.825])
    assert (iv.lo, iv.hi) == (t.lo, 1.0) and t.hi > 1.0  # t over the seeds (wider than pooled Wilson), clipped
    assert iv.method == T_METHOD and iv.n == 3
    same = accuracy_interval([(400, 400)] * 3)  # seeds that agree: the t interval has no width, the examples do
    assert same.hi == 1.0 and same.lo == wilson_interval(1200, 1200).lo < 1.0
    low = accuracy_interval([(10, 400), (0, 400), (0, 400)])
    assert low.lo == 0.0 and low.hi == seed_interval([0.025, 0, 0]).hi  # clipped to [0, 1]
    with pytest.raises(ValueError):
        accuracy_interval([])
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


def test_mcnemar_exact_by_hand():
    # 10 discordant examples for A, 2 for B: 2 · P(X ≤ 2), X ~ Bin(12, 1/2) = 2 · (1 + 12 + 66) / 4096
    assert mcnemar_exact(10, 2) == pytest.approx(2 * 79 / 4096)
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)


def test_a_paired_difference_on_the_same_examples_with_one_seed():
    a = np.array([True] * 60 + [False] * 40)
    b = a.copy()
    b[:12] = False  # A solves 12 examples B misses, nothing the other way
    p = paired_accuracy({0: a}, {0: b})
    assert p.diff == pytest.approx(0.12) and (p.only_a, p.only_b) == (12, 0)
    assert p.p_value == pytest.approx(2 / 2**12) and p.verdict == "higher"
    few = a.copy()
    few[:4] = False  # 4 discordant examples, all A's: McNemar p = 0.125, whatever the bootstrap says
    assert paired_accuracy({0: a}, {0: few}).p_value == 0.125
    assert paired_accuracy({0: a}, {0: few}).verdict == "indistinguishable"
    assert p.interval.method == MCNEMAR_METHOD and p.interval.lo > 0
    assert paired_accuracy({0: b}, {0: a}).verdict == "lower"
    assert paired_accuracy({0: a}, {0: a}).verdict == "indistinguishable"


def test_pairing_resolves_what_two_separate_intervals_cannot():
    """B solves everything A solves and 25 more of 400: the separate Wilson intervals overlap, McNemar does not."""
    a = np.zeros(400, dtype=bool)
    a[:200] = True
    b = a.copy()
    b[200:225] = True
    assert wilson_interval(225, 400).lo < wilson_interval(200, 400).hi
    assert paired_accuracy({0: b}, {0: a}).verdict == "higher"


def test_several_common_seeds_use_t_over_the_per_seed_differences():
    rng = np.random.default_rng(1)
    a = {s: rng.random(50) < 0.8 for s in range(3)}
    b = {s: rng.random(50) < 0.5 for s in range(4)}
    p = paired_accuracy(a, b)
    diffs = [a[s].mean() - b[s].mean() for s in range(3)]
    assert p.diff == pytest.approx(np.mean(diffs)) and p.p_value is None
    assert p.interval == seed_interval(diffs)


def test_pairing_refuses_different_examples_or_no_common_seed():
    with pytest.raises(ValueError, match="different examples"):
        paired_accuracy({0: np.ones(5, bool)}, {0: np.ones(6, bool)})
    with pytest.raises(ValueError, match="no seed in common"):
        paired_accuracy({0: np.ones(5, bool)}, {1: np.ones(5, bool)})
    assert not math.isnan(paired_accuracy({0: np.ones(5, bool)}, {0: np.ones(5, bool)}).diff)


def test_wilson_is_exactly_0_and_1_at_the_ends_where_rounding_would_leave_a_trace_and_refuses_no_examples():
    assert wilson_interval(0, 2).lo == 0.0  # centre − half rounds to 5.6e-17 here
    assert wilson_interval(2, 2).hi == 1.0
    one = wilson_interval(1, 1)
    assert one.hi == 1.0 and 0 < one.lo < 1
    with pytest.raises(ValueError):
        wilson_interval(0, 0)
    with pytest.raises(ValueError):
        wilson_interval(-1, 5)


def test_every_accuracy_interval_follows_the_asked_level():
    one = accuracy_interval([(30, 40)], level=0.8)
    assert one == wilson_interval(30, 40, level=0.8) and one.hi - one.lo < wilson_interval(30, 40).hi - \
        wilson_interval(30, 40).lo
    seeds = [(30, 40), (36, 40), (33, 40)]
    t, pooled = seed_interval([0.75, 0.9, 0.825], 0.5), wilson_interval(99, 120, 0.5)
    assert accuracy_interval(seeds, 0.5) == Interval(min(t.lo, pooled.lo), min(1.0, max(t.hi, pooled.hi)),
                                                    T_METHOD, 3)
    same = accuracy_interval([(400, 400)] * 3, 0.5)  # zero seed spread: the pooled Wilson bound at that level
    assert same.lo == wilson_interval(1200, 1200, 0.5).lo > wilson_interval(1200, 1200).lo


def test_one_seed_pairs_by_a_bootstrap_of_the_same_examples_2000_resamples_from_seed_0():
    rng = np.random.default_rng(7)
    a, b = rng.random(120) < 0.7, rng.random(120) < 0.5
    d = a.astype(float) - b.astype(float)
    for level in (0.95, 0.8):
        stats = d[np.random.default_rng(0).integers(0, 120, size=(2000, 120))].mean(axis=1)
        lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
        p = paired_accuracy({3: a}, {3: b}, level=level)
        assert (p.interval.lo, p.interval.hi, p.interval.n) == (lo, hi, 120) and p.diff == d.mean()
    other = paired_accuracy({3: a}, {3: b}, n_boot=500, seed=4).interval
    stats = d[np.random.default_rng(4).integers(0, 120, size=(500, 120))].mean(axis=1)
    assert (other.lo, other.hi) == tuple(np.quantile(stats, [0.025, 0.975]))


def test_flags_are_read_as_booleans_whatever_their_type_and_a_single_example_pairs():
    a, b = np.array([1, 1, 0, 0, 1]), np.array([1, 0, 1, 0, 0])  # 0/1 integers, as a CSV gives them back
    p = paired_accuracy({0: a}, {0: b})
    assert (p.only_a, p.only_b) == (2, 1) and p.diff == pytest.approx(0.2)
    assert paired_accuracy({0: np.array([True])}, {0: np.array([False])}).diff == 1.0
    with pytest.raises(ValueError, match="different examples"):
        paired_accuracy({0: np.ones((2, 3), bool)}, {0: np.ones((2, 3), bool)})
    with pytest.raises(ValueError, match="different examples"):
        paired_accuracy({0: np.ones(0, bool)}, {0: np.ones(0, bool)})


def test_two_common_seeds_already_pair_by_t_and_count_the_discordant_examples_of_both():
    a = {0: np.array([1, 1, 1, 0], bool), 1: np.array([1, 1, 0, 0], bool)}
    b = {0: np.array([1, 0, 0, 0], bool), 1: np.array([0, 1, 1, 0], bool)}
    p = paired_accuracy(a, b, level=0.8)
    assert p.interval == seed_interval([0.5, 0.0], 0.8) and p.p_value is None
    assert (p.only_a, p.only_b) == (3, 1)


def test_holm_rejects_a_p_value_exactly_at_its_threshold():
    assert holm_rejected([0.025, 0.05]) == [True, True]  # 0.025 ≤ 0.05 / 2, then 0.05 ≤ 0.05 / 1
    assert holm_rejected([0.0250001, 0.04]) == [False, False]  # the smallest misses 0.05 / 2: nothing rejected


def test_flags_read_back_as_floats_pair_too_and_the_default_is_2000_resamples():
    p = paired_accuracy({0: np.array([1.0, 1.0, 0.0])}, {0: np.array([0.0, 1.0, 1.0])})
    assert (p.only_a, p.only_b) == (1, 1)
    rng = np.random.default_rng(1)
    a, b = rng.random(120) < 0.7, rng.random(120) < 0.5
    default = paired_accuracy({0: a}, {0: b}).interval
    assert default == paired_accuracy({0: a}, {0: b}, n_boot=2000, seed=0).interval
    assert default != paired_accuracy({0: a}, {0: b}, n_boot=2001, seed=0).interval  # (these data tell them apart)
