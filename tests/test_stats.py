"""Intervals over seeds and windows, and paired comparisons, on synthetic data with known answers."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pe_bench import stats as stats_mod
from pe_bench.stats import (
    BOOTSTRAP_METHOD,
    LOG_T_METHOD,
    T_METHOD,
    Interval,
    _t_central,
    block_indices,
    block_length,
    bootstrap_p_value,
    bootstrap_ppl_interval,
    context_gain,
    holm_rejected,
    log_seed_interval,
    normal_quantile,
    paired_difference,
    ppl,
    ppl_interval,
    seed_interval,
    t_p_value,
    t_quantile,
)

TRUE_LOSS = 3.0  # nats per token: the windows' population perplexity is e³


def windows(rng: np.random.Generator, n: int, loss: float = TRUE_LOSS) -> tuple[np.ndarray, np.ndarray]:
    """n windows of 50..150 scored tokens whose per-token loss is Gamma-distributed with mean `loss`, independent of
    the window's size, so the population perplexity is exp(loss)."""
    tokens = rng.integers(50, 151, size=n).astype(float)
    return tokens * rng.gamma(16.0, loss / 16.0, size=n), tokens


def test_t_quantile_table_normal_limit_and_monotone():
    assert t_quantile(1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile(10) == pytest.approx(2.228, abs=1e-3)
    assert t_quantile(30) == pytest.approx(2.042, abs=1e-3)
    assert t_quantile(10**6) == pytest.approx(1.96, abs=0.01)
    qs = [t_quantile(df) for df in range(1, 400)]  # across the table, the exact range and Cornish-Fisher
    assert all(x > y for x, y in zip(qs, qs[1:]))
    assert t_quantile(5, 0.95) == pytest.approx(2.015, abs=1e-3)  # other levels, from standard tables
    assert t_quantile(1, 0.995) == pytest.approx(63.657, abs=1e-3)
    assert t_quantile(40, 0.975) == pytest.approx(2.021, abs=1e-3)
    assert t_quantile(120, 0.995) == pytest.approx(2.617, abs=1e-3)
    assert t_quantile(7, 0.025) == -t_quantile(7, 0.975)
    assert normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-6)
    assert normal_quantile(1e-4) == pytest.approx(-3.719016, abs=1e-6)
    for bad in (0, -3):
        with pytest.raises(ValueError):
            t_quantile(bad)
    with pytest.raises(ValueError):
        t_quantile(5, 1.0)


def test_seed_interval_of_known_values():
    iv = seed_interval([1.0, 2.0, 3.0])  # mean 2, s = 1
    half = 4.303 / math.sqrt(3)
    assert iv.lo == pytest.approx(2 - half, abs=1e-3) and iv.hi == pytest.approx(2 + half, abs=1e-3)
    assert (iv.method, iv.n) == (T_METHOD, 3)
    with pytest.raises(ValueError):
        seed_interval([1.0])


def test_seed_interval_covers_the_mean_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    hits = [(iv := seed_interval(rng.normal(5.0, 2.0, size=3))).lo <= 5.0 <= iv.hi for _ in range(2000)]
    assert 0.93 <= np.mean(hits) <= 0.97


def test_ppl_is_token_weighted():
    assert ppl(np.array([2.0, 10.0]), np.array([1, 3])) == pytest.approx(math.exp(3.0))
    with pytest.raises(ValueError):
        ppl(np.array([1.0, 2.0]), np.array([1]))


def test_bootstrap_covers_the_true_perplexity_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    hits = []
    for rep in range(200):
        iv = bootstrap_ppl_interval(*windows(rng, 100), n_boot=300, seed=rep)
        hits.append(iv.lo <= math.exp(TRUE_LOSS) <= iv.hi)
    assert 0.88 <= np.mean(hits) <= 0.99


def test_bootstrap_is_deterministic_and_fast_at_full_size():
    nll, tokens = windows(np.random.default_rng(2), 1000)
    iv = bootstrap_ppl_interval(nll, tokens)  # 1000 windows × 2000 resamples
    assert iv == bootstrap_ppl_interval(nll, tokens)
    assert iv != bootstrap_ppl_interval(nll, tokens, seed=1)
    assert iv.lo < ppl(nll, tokens) < iv.hi and (iv.method, iv.n) == (BOOTSTRAP_METHOD, 1000)


def test_ppl_interval_uses_t_over_seeds_or_bootstrap_for_one_seed():
    rng = np.random.default_rng(3)
    runs = [windows(rng, 100) for _ in range(3)]
    log_t = seed_interval([math.log(ppl(*r)) for r in runs])
    assert ppl_interval(runs) == Interval(math.exp(log_t.lo), math.exp(log_t.hi), LOG_T_METHOD, 3)
    one = ppl_interval(runs[:1], n_boot=200)
    assert one == bootstrap_ppl_interval(*runs[0], n_boot=200) and one.method == BOOTSTRAP_METHOD
    with pytest.raises(ValueError):
        ppl_interval([])


def shared_difficulty(rng: np.random.Generator, n: int, shift: float, noise: float):
    """A and B on the same n windows with a strong window effect (per-token loss varies ±0.5 between windows):
    B's nll is A's plus shift·tokens plus zero-mean noise of `noise` nats per token."""
    tokens = np.full(n, 128.0)
    nll_a = tokens * (TRUE_LOSS + rng.normal(0, 0.5, size=n))
    nll_b = nll_a + tokens * (shift + rng.normal(0, noise, size=n))
    return (nll_a, tokens), (nll_b, tokens)


def test_paired_bootstrap_finds_a_real_difference_that_separate_intervals_miss():
    a, b = shared_difficulty(np.random.default_rng(4), 200, shift=0.05, noise=0.01)
    p = paired_difference({0: a}, {0: b})
    assert p.diff == pytest.approx(ppl(*a) - ppl(*b)) and p.diff < 0
    assert p.ratio == pytest.approx(math.exp(-0.05), abs=0.005)
    assert p.excludes_zero and p.verdict == "lower"
    assert (p.interval.method, p.interval.n) == (BOOTSTRAP_METHOD, 200)
    assert paired_difference({0: b}, {0: a}).verdict == "higher"
    ia, ib = bootstrap_ppl_interval(*a), bootstrap_ppl_interval(*b)
    assert ia.hi > ib.lo  # the separate intervals overlap ...
    width = p.interval.hi - p.interval.lo
    assert width < 0.1 * min(ia.hi - ia.lo, ib.hi - ib.lo)  # ... the paired one is far narrower


def test_paired_bootstrap_under_the_null_contains_zero():
    rng = np.random.default_rng(5)
    a, b = shared_difficulty(rng, 200, shift=0.0, noise=0.05)
    p = paired_difference({0: a}, {0: b})
    assert p.interval.lo < 0 < p.interval.hi and not p.excludes_zero and p.verdict == "indistinguishable"
    false_alarms = [paired_difference({0: a}, {0: b}, n_boot=200, seed=i).excludes_zero
                    for i, (a, b) in enumerate(shared_difficulty(rng, 100, 0.0, 0.05) for _ in range(100))]
    assert np.mean(false_alarms) <= 0.12


def test_paired_over_two_or_more_common_seeds_uses_t():
    rng = np.random.default_rng(6)
    runs = {s: shared_difficulty(rng, 50, shift=0.05, noise=0.01) for s in range(4)}
    a = {s: runs[s][0] for s in (0, 1, 2)}
    b = {s: runs[s][1] for s in (1, 2, 3)}  # seeds 1 and 2 pair
    p = paired_difference(a, b)
    diffs = [ppl(*runs[s][0]) - ppl(*runs[s][1]) for s in (1, 2)]
    assert p.diff == pytest.approx(np.mean(diffs))
    assert p.ratio == pytest.approx(np.mean([ppl(*runs[s][0]) / ppl(*runs[s][1]) for s in (1, 2)]))
    assert p.interval == seed_interval(diffs) and (p.interval.method, p.interval.n) == (T_METHOD, 2)


def test_paired_rejects_different_windows_and_no_common_seed():
    a, b = shared_difficulty(np.random.default_rng(7), 20, shift=0.0, noise=0.01)
    with pytest.raises(ValueError, match="different windows"):
        paired_difference({0: a}, {0: (b[0][:-1], b[1][:-1])})
    with pytest.raises(ValueError, match="different windows"):
        paired_difference({0: a}, {0: (b[0], b[1] + np.arange(20))})
    with pytest.raises(ValueError, match="no seed in common"):
        paired_difference({0: a}, {1: b})


def test_interval_is_a_frozen_record():
    iv = Interval(1.0, 2.0, T_METHOD, 3)
    with pytest.raises(AttributeError):
        iv.lo = 0.0  # type: ignore[misc]


def _binomial_quantile(n: int, q: float) -> int:
    """The smallest k with P(Binomial(n, 1/2) ≤ k) ≥ q, exactly."""
    total = 0
    for k in range(n + 1):
        total += math.comb(n, k)
        if total / 2**n >= q:
            return k
    return n


# Windows of one token each whose nll is 0 or 1 (half each): a resample's mean nll is Binomial(N, 1/2) / N, so the
# bootstrap distribution of exp(mean nll) is known exactly and its 2.5% / 97.5% percentiles are those of the binomial
# (its 5% / 95% ones — a 90% interval — differ by several counts at N = 400).
N_BERNOULLI = 400


def _bernoulli_windows() -> tuple[np.ndarray, np.ndarray]:
    return np.repeat([0.0, 1.0], N_BERNOULLI // 2), np.ones(N_BERNOULLI)


def test_the_bootstrap_interval_is_the_95_percent_one_of_a_known_distribution():
    iv = bootstrap_ppl_interval(*_bernoulli_windows(), n_boot=20000, block=1)  # blocks of 1: i.i.d. windows
    for end, q in ((iv.lo, 0.025), (iv.hi, 0.975)):
        k = math.log(end) * N_BERNOULLI
        assert abs(k - _binomial_quantile(N_BERNOULLI, q)) <= 1.5, (end, q)
    k90 = _binomial_quantile(N_BERNOULLI, 0.05)
    assert math.log(iv.lo) * N_BERNOULLI < k90 - 2  # clearly wider than the 90% interval


def test_the_paired_bootstrap_interval_is_the_95_percent_one_of_a_known_distribution():
    nll, tokens = _bernoulli_windows()
    p = paired_difference({0: (nll, tokens)}, {0: (np.zeros_like(nll), tokens)}, n_boot=20000,
                          block=1)  # B: ppl 1 exactly
    assert p.interval.method == BOOTSTRAP_METHOD
    for end, q in ((p.interval.lo, 0.025), (p.interval.hi, 0.975)):
        k = math.log(end + 1.0) * N_BERNOULLI
        assert abs(k - _binomial_quantile(N_BERNOULLI, q)) <= 1.5, (end, q)


# The Student-t distribution, computed independently of pe_bench: closed forms for df 1–4 and the density integrated by
# Simpson's rule (its error is far below the tolerances used).
def _t_cdf_closed(t: float, df: int) -> float:
    """P(T < t) for df = 1..4 (the textbook closed forms)."""
    if df == 1:
        return 0.5 + math.atan(t) / math.pi
    if df == 2:
        return 0.5 + t / (2 * math.sqrt(2 + t * t))
    if df == 3:
        u = t / math.sqrt(3)
        return 0.5 + (u / (1 + u * u) + math.atan(u)) / math.pi
    x = t * t / 4
    return 0.5 + 3 / 8 * t / math.sqrt(1 + x) * (1 - x / (3 * (1 + x)))


def _t_central_integrated(t: float, df: int, panels: int = 4000) -> float:
    """P(|T| < t) = 2 ∫₀ᵗ f(x) dx, f the t density, by composite Simpson."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    x = np.linspace(0.0, t, panels + 1)
    f = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
    w = np.ones(panels + 1)
    w[1:-1:2], w[2:-1:2] = 4, 2
    return float(2 * (t / panels) / 3 * (w * f).sum())


@pytest.mark.parametrize("df", [1, 2, 3, 4])
def test_the_t_distribution_function_matches_the_closed_forms(df):
    for t in (0.1, 0.7, 1.0, 2.5, 9.0, 40.0):
        assert _t_central(t, df) == pytest.approx(2 * _t_cdf_closed(t, df) - 1, abs=1e-13), (t, df)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(df=st.integers(1, 300), t=st.floats(0.01, 12.0))
def test_the_t_distribution_function_is_the_integrated_density(df, t):
    assert _t_central(t, df) == pytest.approx(_t_central_integrated(t, df), abs=1e-9)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(df=st.integers(1, 2000), q=st.floats(0.0005, 0.9995))
def test_t_quantile_inverts_the_t_distribution_at_every_df_and_level(df, q):
    """Below the table and the closed forms it is found by bisection (df ≤ 200) or Cornish-Fisher (df > 200); both
    must give the t whose central probability is |2q − 1|, with the sign of q − ½."""
    t = t_quantile(df, q)
    assert math.copysign(1.0, t) == math.copysign(1.0, q - 0.5) or t == 0.0
    assert _t_central(abs(t), df) == pytest.approx(abs(2 * q - 1), abs=2e-12)
    assert t_quantile(df, 1 - q) == -t


@pytest.mark.parametrize("df", [1, 2, 3, 4, 31, 150, 201, 5000])
def test_the_median_of_every_t_distribution_is_exactly_zero(df):
    assert t_quantile(df, 0.5) == 0.0


def test_t_quantiles_of_reference_tables():
    """Values from standard tables (NIST/SEMATECH e-Handbook 1.3.6.7.2), beyond the built-in 0.975 table."""
    for df, q, want in ((1, 0.995, 63.657), (2, 0.995, 9.925), (3, 0.9, 1.638), (4, 0.95, 2.132),
                        (31, 0.975, 2.040), (60, 0.99, 2.390), (100, 0.9, 1.290), (201, 0.975, 1.972),
                        (1000, 0.975, 1.962), (2, 0.6, 0.289), (8, 0.75, 0.706)):
        assert t_quantile(df, q) == pytest.approx(want, abs=1e-3), (df, q)
    assert t_quantile(1, 0.995) == pytest.approx(math.tan(math.pi * 0.495), rel=1e-14)
    assert t_quantile(2, 0.995) == pytest.approx(0.99 / math.sqrt(2 * 0.995 * 0.005), rel=1e-14)
    assert t_quantile(30) == 2.042272456 and t_quantile(1) == 12.706204736  # the table itself


@pytest.mark.parametrize("level", [0.5, 0.8, 0.9, 0.99])
def test_every_interval_is_at_the_level_asked_for(level):
    v = [3.0, 5.0, 4.0, 6.5]
    iv = seed_interval(v, level)
    half = t_quantile(3, (1 + level) / 2) * float(np.std(v, ddof=1)) / 2
    assert (iv.lo, iv.hi) == pytest.approx((np.mean(v) - half, np.mean(v) + half), rel=1e-12)
    nll, tok = windows(np.random.default_rng(4), 30)
    per_seed = [(nll, tok), (nll * 1.1, tok)]
    log_t = seed_interval([math.log(ppl(*s)) for s in per_seed], level)
    assert ppl_interval(per_seed, level) == Interval(math.exp(log_t.lo), math.exp(log_t.hi), LOG_T_METHOD, 2)
    assert ppl_interval(per_seed[:1], level, n_boot=300, seed=5) == bootstrap_ppl_interval(nll, tok, level, 300, 5)
    p = paired_difference({0: per_seed[0], 1: per_seed[1]}, {0: (nll * 0.9, tok), 1: (nll, tok)}, level)
    assert p.interval == seed_interval([ppl(*per_seed[0]) - ppl(nll * 0.9, tok), ppl(*per_seed[1]) - ppl(nll, tok)],
                                       level)


def _independent_resamples(n: int, n_boot: int, seed: int) -> np.ndarray:
    """The window indices of each resample of the moving-block bootstrap: ⌈n/b⌉ runs of b = ⌈n^(1/3)⌉ consecutive
    windows (circularly) from starts drawn uniformly by NumPy's default generator, cut to n windows."""
    b = math.ceil(round(n ** (1 / 3), 9))
    k = -(-n // b)
    starts = np.random.default_rng(seed).integers(0, n, size=(n_boot, k, 1))
    out = np.empty((n_boot, n), dtype=np.int64)
    for r in range(n_boot):
        run = [(int(s) + i) % n for s in starts[r, :, 0] for i in range(b)]
        out[r] = run[:n]
    return out


def test_bootstrap_endpoints_are_the_percentiles_of_the_resampled_perplexities():
    nll, tok = windows(np.random.default_rng(2), 7)
    idx = _independent_resamples(7, 2000, 0)  # the defaults: 2000 resamples, seed 0
    want = np.quantile(np.exp(nll[idx].sum(1) / tok[idx].sum(1)), [0.025, 0.975])
    iv = bootstrap_ppl_interval(nll, tok)
    assert (iv.lo, iv.hi) == pytest.approx(tuple(want), rel=1e-12)
    assert iv.n == 7 and iv.method == BOOTSTRAP_METHOD
    idx = _independent_resamples(7, 500, 9)
    want = np.quantile(np.exp(nll[idx].sum(1) / tok[idx].sum(1)), [0.05, 0.95])
    iv = bootstrap_ppl_interval(nll, tok, level=0.9, n_boot=500, seed=9)
    assert (iv.lo, iv.hi) == pytest.approx(tuple(want), rel=1e-12)


def test_paired_bootstrap_endpoints_are_the_percentiles_of_the_same_resampled_windows():
    nll, tok = windows(np.random.default_rng(3), 9)
    nll_b = nll * np.random.default_rng(4).uniform(0.8, 1.2, size=9)
    idx = _independent_resamples(9, 2000, 0)
    d = np.exp(nll[idx].sum(1) / tok[idx].sum(1)) - np.exp(nll_b[idx].sum(1) / tok[idx].sum(1))
    p = paired_difference({3: (nll, tok)}, {3: (nll_b, tok)})
    assert (p.interval.lo, p.interval.hi) == pytest.approx(tuple(np.quantile(d, [0.025, 0.975])), rel=1e-12)
    assert p.diff == pytest.approx(ppl(nll, tok) - ppl(nll_b, tok), rel=1e-12)
    assert p.ratio == pytest.approx(ppl(nll, tok) / ppl(nll_b, tok), rel=1e-12)


def test_chunking_the_resamples_never_changes_the_interval(monkeypatch):
    """Resamples are drawn in chunks of at most MAX_DRAWS indices; the chunk size must not change any number."""
    nll, tok = windows(np.random.default_rng(5), 12)
    whole = bootstrap_ppl_interval(nll, tok, n_boot=101, seed=1)
    for draws in (12, 30, 12 * 100):  # one resample per chunk, two, and a last chunk that is shorter
        monkeypatch.setattr(stats_mod, "MAX_DRAWS", draws)
        assert bootstrap_ppl_interval(nll, tok, n_boot=101, seed=1) == whole


def test_the_inputs_each_statistic_accepts_and_refuses():
    assert ppl([2.0], [1]) == pytest.approx(math.exp(2.0))  # one window is enough
    assert ppl([2.0, 0.0], [1, 0]) == pytest.approx(math.exp(2.0))  # a window with no scored token is allowed
    assert bootstrap_ppl_interval([2.0, 1.0], [1, 1], n_boot=1).method == BOOTSTRAP_METHOD  # one resample is enough
    for nll, tok in (([1.0, 1.0], [1, -1]), ([1.0], [0]), ([], []), ([1.0, 2.0], [1])):
        with pytest.raises(ValueError):
            ppl(nll, tok)
    with pytest.raises(ValueError):
        bootstrap_ppl_interval([2.0, 1.0], [1, 1], n_boot=0)
    for level in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError):
            seed_interval([1.0, 2.0], level)
        with pytest.raises(ValueError):
            bootstrap_ppl_interval([2.0, 1.0], [1, 1], level)
    assert seed_interval([1, 2, 3]) == seed_interval([1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        seed_interval([1.0, float("nan")])
    with pytest.raises(ValueError):
        ppl_interval([])


def test_normal_quantiles_to_full_double_precision():
    """Acklam's approximation refined by one Halley step: exact to the last bits in the centre and the tails."""
    assert normal_quantile(0.5) == 0.0
    for q, want in ((0.975, 1.959963984540054), (0.6, 0.2533471031357997), (0.9, 1.2815515655446004),
                    (0.3, -0.5244005127080407), (0.001, -3.090232306167813)):
        assert normal_quantile(q) == pytest.approx(want, abs=1e-15), q
    for bad in (0.0, 1.0, 1.5, -0.1):  # refused by name, not by a math domain error on the way
        with pytest.raises(ValueError, match=rf"quantile level must be in \(0, 1\), got {bad}$"):
            normal_quantile(bad)


def test_quantile_levels_outside_0_1_are_refused_by_name():
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"got {bad}$"):
            t_quantile(40, bad)


def test_one_seeds_interval_is_the_bootstrap_with_its_defaults():
    nll, tok = windows(np.random.default_rng(6), 20)
    assert ppl_interval([(nll, tok)]) == bootstrap_ppl_interval(nll, tok, 0.95, 2000, 0)


def test_a_perplexity_interval_over_seeds_is_taken_on_the_log_scale_and_stays_positive():
    spread = [12.0, 18.0, 40.0]  # a t interval on perplexity itself would go below 0
    assert seed_interval(spread).lo < 0
    iv = log_seed_interval(spread)
    t = seed_interval(np.log(spread))
    assert (iv.lo, iv.hi) == pytest.approx((math.exp(t.lo), math.exp(t.hi)), rel=1e-12)
    assert 0 < iv.lo < math.exp(np.log(spread).mean()) < iv.hi and iv.method == LOG_T_METHOD
    with pytest.raises(ValueError):
        log_seed_interval([1.0, -2.0])


def test_moving_blocks_are_runs_of_the_cube_root_of_the_windows():
    assert [block_length(n) for n in (1, 7, 8, 9, 27, 28, 1000, 4740)] == [1, 2, 2, 3, 3, 4, 10, 17]
    idx = block_indices(30, 5, np.random.default_rng(0))  # b = 4: runs of 4 consecutive windows, circularly
    assert idx.shape == (5, 30)
    for row in idx:
        for k in range(0, 28, 4):
            assert [(row[k] + i) % 30 for i in range(4)] == list(row[k : k + 4])
    assert (block_indices(30, 3, np.random.default_rng(0), block=1) ==
            np.random.default_rng(0).integers(0, 30, size=(3, 30, 1)).reshape(3, 30)).all()


def test_a_block_bootstrap_is_wider_than_an_iid_one_on_correlated_windows():
    rng = np.random.default_rng(7)
    drift = np.repeat(rng.normal(0, 0.3, 50), 20)  # 1000 windows whose difficulty drifts in stretches of 20
    tokens = np.full(1000, 64.0)
    nll = tokens * (TRUE_LOSS + drift + rng.normal(0, 0.05, 1000))
    iid = bootstrap_ppl_interval(nll, tokens, block=1)
    blocks = bootstrap_ppl_interval(nll, tokens)
    assert (blocks.hi - blocks.lo) > 1.5 * (iid.hi - iid.lo)


def test_p_values_of_the_paired_tests():
    assert t_p_value(np.array([1.0, 1.0, 1.0])) == 0.0 and t_p_value(np.zeros(3)) == 1.0
    # t = 2 with 3 degrees of freedom: two-sided p = 0.1393 (tables)
    assert t_p_value(np.array([1.0, 2.0, 3.0, 6.0]) - 3.0 + 2 * np.std([1, 2, 3, 6], ddof=1) / 2) == \
        pytest.approx(0.13934, abs=1e-4)
    assert bootstrap_p_value(np.array([-1.0, 1.0, 2.0, 3.0])) == 0.5
    assert bootstrap_p_value(np.array([1.0, 2.0])) == 0.0
    p = paired_difference({0: windows(np.random.default_rng(1), 50)}, {0: windows(np.random.default_rng(1), 50)})
    assert p.p_value == 1.0  # identical: every resampled difference is 0


def test_holm_rejects_step_down_and_stops_at_the_first_failure():
    assert holm_rejected([0.01, 0.04, 0.03]) == [True, False, False]  # 0.01 ≤ .05/3; 0.03 > .05/2: stop
    assert holm_rejected([0.001, 0.02, 0.04]) == [True, True, True]  # .001 ≤ .0167, .02 ≤ .025, .04 ≤ .05
    assert holm_rejected([0.2, 0.001]) == [False, True]
    assert holm_rejected([]) == []
    # without the correction every p < .05 would be rejected
    assert sum(holm_rejected([0.02] * 5)) == 0


def test_context_gain_is_the_difference_of_token_weighted_means_over_paired_blocks():
    rng = np.random.default_rng(0)
    count, ref_count = np.full(40, 448.0), np.full(40, 256.0)
    nll = count * (1.80 + rng.normal(0, 0.05, 40))
    ref = ref_count * (1.85 + rng.normal(0, 0.05, 40))
    g = context_gain(nll, count, ref, ref_count)
    assert g.loss == pytest.approx(nll.sum() / count.sum()) and g.ref_loss == pytest.approx(ref.sum() / ref_count.sum())
    assert g.gain == pytest.approx(g.loss - g.ref_loss) and g.interval.lo < g.gain < g.interval.hi < 0
    assert g.interval.n == 40 and g.interval.method == BOOTSTRAP_METHOD
    with pytest.raises(ValueError):
        context_gain(nll, count, ref[:10], ref_count[:10])


def test_the_context_gain_interval_is_the_moving_block_bootstrap_of_2000_resamples_from_seed_0():
    rng = np.random.default_rng(3)
    count, ref_count = np.full(30, 448.0), np.full(30, 256.0)
    nll, ref = count * (1.8 + rng.normal(0, 0.05, 30)), ref_count * (1.85 + rng.normal(0, 0.05, 30))

    def reference(level: float, n_boot: int, seed: int) -> tuple[float, float]:
        idx = block_indices(30, n_boot, np.random.default_rng(seed))
        s = [a[idx].sum(axis=1) for a in (nll, count, ref, ref_count)]
        return tuple(np.quantile(s[0] / s[1] - s[2] / s[3], [(1 - level) / 2, (1 + level) / 2]))

    for level in (0.95, 0.8):
        g = context_gain(nll, count, ref, ref_count, level=level)
        assert (g.interval.lo, g.interval.hi) == reference(level, 2000, 0)
    g = context_gain(nll, count, ref, ref_count, n_boot=300, seed=5)
    assert (g.interval.lo, g.interval.hi) == reference(0.95, 300, 5)


def test_the_context_gain_takes_one_block_and_a_zero_loss_and_refuses_sides_without_tokens():
    one = context_gain(np.array([10.0]), np.array([5.0]), np.array([0.0]), np.array([4.0]))
    assert (one.gain, one.interval.lo, one.interval.hi) == (2.0, 2.0, 2.0)  # a perfect reference: loss 0
    assert context_gain(np.array([2.0, 3.0]), np.array([1.0, 0.0]), np.array([1.0, 1.0]), np.array([1.0, 1.0])).gain \
        == 4.0  # one token on the scored side
    assert context_gain(np.array([2.0, 2.0]), np.array([1.0, 1.0]), np.array([3.0, 0.0]), np.array([1.0, 0.0])).gain \
        == -1.0  # one token on the reference side
    for counts in ((np.zeros(2), np.ones(2)), (np.ones(2), np.zeros(2))):
        with pytest.raises(ValueError, match="tokens scored on both"):
            context_gain(np.zeros(2), counts[0], np.zeros(2), counts[1])
    with pytest.raises(ValueError):
        context_gain(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0))


def test_a_resample_of_blocks_without_tokens_is_left_out_without_a_warning():
    import warnings

    count = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 50.0])  # most blocks score nothing past L
    nll = 2.0 * count
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = context_gain(nll, count, np.full(8, 10.0), np.full(8, 5.0))
    assert g.gain == 0.0 and g.interval.lo == g.interval.hi == 0.0


def test_a_log_perplexity_interval_takes_a_perfect_model_and_refuses_a_zero():
    assert log_seed_interval([1.0, 1.0, 1.0]).lo == 1.0
    with pytest.raises(ValueError, match="must be positive"):
        log_seed_interval([0.0, 2.0])


def test_several_seeds_pair_by_t_with_its_p_value():
    rng = np.random.default_rng(2)
    a = {s: windows(rng, 20) for s in range(3)}
    b = {s: (a[s][0] * 1.05, a[s][1]) for s in range(3)}
    p = paired_difference(a, b, level=0.8)
    d = np.array([ppl(*a[s]) - ppl(*b[s]) for s in range(3)])
    assert p.interval == seed_interval(d, 0.8) and p.p_value == t_p_value(d)
    one = paired_difference({0: a[0]}, {0: b[0]}, n_boot=400)
    assert one.p_value is not None and 0 <= one.p_value <= 1
    assert paired_difference({0: a[0]}, {0: b[0]}) == paired_difference({0: a[0]}, {0: b[0]}, n_boot=2000, seed=0)


def test_the_truncation_contrast_is_the_paired_loss_difference_on_the_same_tokens():
    """More context that lowers the loss is negative; t over seeds with several; with one seed, a paired block
    bootstrap over blocks of ≥ 16K tokens, and no interval when the tokens make fewer than ten such blocks."""
    import math

    import numpy as np

    from pe_bench.stats import CONTRAST_BLOCK_TOKENS, truncation_contrast

    rng = np.random.default_rng(0)
    tok = np.full(1024, 16.0)  # the committed sliding pass: 16,384 tokens, one block
    less = rng.normal(30.0, 3.0, 1024)
    c = truncation_contrast({0: (less - 0.16, less, tok)})
    assert c.value == pytest.approx(-0.01) and c.ratio == pytest.approx(math.exp(-0.01))
    assert c.interval is None and c.tokens == 16384 and c.seeds == 1
    big = np.full(10 * CONTRAST_BLOCK_TOKENS // 16, 16.0)
    less = rng.normal(30.0, 3.0, len(big))
    more = less - 0.16 + rng.normal(0, 0.5, len(big))
    c = truncation_contrast({0: (more, less, big)})
    assert c.interval is not None and c.interval.lo < c.value < c.interval.hi < 0
    three = truncation_contrast({s: (less + d * 16, less, big) for s, d in enumerate([-0.02, -0.01, 0.0])})
    assert three.value == pytest.approx(-0.01) and three.seeds == 3
    assert three.interval.lo == pytest.approx(-0.01 - 4.302653 * 0.01 / math.sqrt(3), abs=1e-6)
    with pytest.raises(ValueError):
        truncation_contrast({0: (less[:-1], less, big)})


def test_fiellers_interval_is_the_set_of_ratios_its_t_test_does_not_reject_and_unbounded_without_a_denominator():
    """Fieller (1954): θ is inside iff |x̄ − θȳ| ≤ t · sd(x − θy)/√n over the paired seeds — checked on a grid; with
    no spread it is the ratio itself; where the denominator's own t interval holds 0 no ratio can be claimed."""
    x, y = np.array([0.10, 0.05, 0.12, 0.08]), np.array([0.40, 0.30, 0.50, 0.35])
    iv = stats_mod.fieller_interval(x, y)
    t = stats_mod.t_quantile(3)
    grid = np.linspace(-1, 2, 30001)
    inside = [th for th in grid if abs((x - th * y).mean()) <= t * (x - th * y).std(ddof=1) / 2]
    assert iv.lo == pytest.approx(min(inside), abs=2e-4) and iv.hi == pytest.approx(max(inside), abs=2e-4)
    assert iv.lo < x.mean() / y.mean() < iv.hi and iv.method == stats_mod.FIELLER_METHOD and iv.n == 4
    same = stats_mod.fieller_interval([0.1, 0.1, 0.1], [0.4, 0.4, 0.4])
    assert same.lo == pytest.approx(0.25) == same.hi
    loose = stats_mod.fieller_interval([0.1, 0.2, 0.1], [0.3, -0.2, 0.1])
    assert (loose.lo, loose.hi) == (-math.inf, math.inf)
    with pytest.raises(ValueError, match="≥ 2 paired values"):
        stats_mod.fieller_interval([0.1], [0.4])


def test_a_one_seed_ratio_of_two_contrasts_has_a_paired_block_bootstrap_interval():
    """(Σa − Σb) / (Σa − Σc) over the same windows: the gain over the headroom of one seed. Its interval covers the
    ratio, narrows with more blocks, is unbounded where the denominator's own interval holds 0, and is None on fewer
    than ten blocks of 16K tokens."""
    from pe_bench.stats import contrast_ratio

    rng = np.random.default_rng(1)
    n, tok = 2560, np.full(2560, 64.0)  # 163,840 tokens: ten blocks of 16K
    a = rng.gamma(4.0, 0.5, n) * 64
    b, c = a - 0.02 * 64 + rng.normal(0, 1, n), a - 0.08 * 64 + rng.normal(0, 1, n)
    iv = contrast_ratio(a, b, c, tok)
    value = (a.sum() - b.sum()) / (a.sum() - c.sum())
    assert iv.lo < value < iv.hi and iv.hi - iv.lo < 0.2 and iv.method == stats_mod.BOOTSTRAP_METHOD
    assert contrast_ratio(a[:256], b[:256], c[:256], tok[:256]) is None  # one block: no interval
    flat = a + rng.normal(0, 3, n)  # the denominator: nothing but noise
    assert math.isinf(contrast_ratio(a, b, flat, tok).lo)
