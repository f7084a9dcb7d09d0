"""Uncertainty of perplexities and accuracies: intervals over seeds, over evaluation windows or over examples, and
paired comparisons.

The evaluator scores a token stream in windows; window w has ``nll[w]`` (summed negative log-likelihood, nats) and
``tokens[w]`` (tokens scored), and a run's perplexity is exp(Σnll / Σtokens).

- Several seeds (independent runs): a Student-t interval over the per-seed mean log-losses, exponentiated (a
  perplexity is exp of a mean, and its bounds stay positive).
- One seed: a percentile moving-block bootstrap over windows (Künsch 1989: runs of ⌈n^{1/3}⌉ consecutive windows,
  circularly, resampled with replacement — neighbouring windows of one text are not independent), which captures
  the variability of the evaluation data but not of training.
- Two schemes A and B evaluated on the same windows: a paired interval of ppl_A − ppl_B, over the seeds both have
  (t) or, with one common seed, a bootstrap that resamples the same windows for both. Pairing cancels the shared
  window difficulty, so it is much tighter than two separate intervals.
- An accuracy (examples solved of n): with one seed a Wilson score interval over the examples; with several seeds the
  t interval over the per-seed accuracies. Two schemes on the same held-out examples: the paired difference, over
  the common seeds (t) or, with one, over the examples (McNemar's exact test on the discordant examples, with a
  paired bootstrap interval of the difference).
- Marking the best row only where it is separated from every other: Holm's step-down correction over its paired
  comparisons with the others (:func:`holm_rejected`), so that the family of tests, not each test, is at 5 %.

Pure numpy (no scipy).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

T_METHOD = "t over seeds"
LOG_T_METHOD = "t over seeds, log scale"
BOOTSTRAP_METHOD = "block bootstrap over windows"
MAX_DRAWS = 1 << 22  # window indices drawn per bootstrap chunk (32 MiB of int64)

# Student-t 0.975 quantiles for df = 1..30 (two-sided 95%).
T975 = (12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252, 2.306004135,
        2.262157163, 2.228138852, 2.200985160, 2.178812830, 2.160368656, 2.144786688, 2.131449546, 2.119905299,
        2.109815578, 2.100922040, 2.093024054, 2.085963447, 2.079613845, 2.073873068, 2.068657610, 2.063898562,
        2.059538553, 2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456)
EXACT_MAX_DF = 200  # above this, the Cornish-Fisher expansion is accurate to better than 1e-9


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    method: str  # T_METHOD or BOOTSTRAP_METHOD
    n: int  # seeds (t) or windows (bootstrap)


@dataclass(frozen=True)
class Paired:
    """ppl_A − ppl_B over paired seeds (or, with one seed, over the same windows)."""

    diff: float  # mean over paired seeds of ppl_A − ppl_B
    ratio: float  # mean over paired seeds of ppl_A / ppl_B
    interval: Interval  # of diff
    p_value: float = 1.0  # two-sided, of diff = 0 (from the same t statistic or bootstrap distribution)

    @property
    def excludes_zero(self) -> bool:
        return self.interval.lo > 0 or self.interval.hi < 0

    @property
    def verdict(self) -> str:
        """'lower' (A's perplexity is lower than B's), 'higher', or 'indistinguishable' (the interval holds 0)."""
        return "lower" if self.interval.hi < 0 else "higher" if self.interval.lo > 0 else "indistinguishable"


def normal_quantile(q: float) -> float:
    """Standard normal quantile: Acklam's rational approximation (relative error 1e-9), then one Halley step."""
    if not 0 < q < 1:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    p = min(q, 1 - q)
    if p < 0.02425:  # tails
        r = math.sqrt(-2 * math.log(p))
        x = (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / \
            ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1)
        x = -x if q > 0.5 else x  # the formula gives the lower tail's (negative) quantile
    else:
        r = (q - 0.5) ** 2
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * (q - 0.5) / \
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    e = 0.5 * math.erfc(-x / math.sqrt(2)) - q  # Halley refinement to full double precision
    u = e * math.sqrt(2 * math.pi) * math.exp(x * x / 2)
    return x - u / (1 + x * u / 2)


def t_quantile(df: int, q: float = 0.975) -> float:
    """Student-t quantile with df degrees of freedom: the table for q = 0.975 and df ≤ 30, closed forms for df 1
    and 2, the exact distribution function inverted by bisection up to df 200, the Cornish-Fisher expansion above."""
    if df != int(df) or df < 1:
        raise ValueError(f"degrees of freedom must be an integer ≥ 1, got {df}")
    if not 0 < q < 1:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    df = int(df)
    if q == 0.975 and df <= len(T975):
        return T975[df - 1]
    if q < 0.5:
        return -t_quantile(df, 1 - q)
    if q == 0.5:
        return 0.0
    if df == 1:
        return math.tan(math.pi * (q - 0.5))
    if df == 2:
        return (2 * q - 1) / math.sqrt(2 * q * (1 - q))
    if df > EXACT_MAX_DF:
        return _cornish_fisher(df, q)
    target, lo, hi = 2 * q - 1, 0.0, 1.0  # P(|T| < t) = 2q − 1
    while _t_central(hi, df) < target:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if _t_central(mid, df) < target else (lo, mid)
    return (lo + hi) / 2


def _t_central(t: float, df: int) -> float:
    """P(|T| < t) for integer df, by the finite series of Abramowitz & Stegun 26.7.3–4."""
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:  # sinθ · Σ_{k<df/2} (1·3⋯(2k−1))/(2·4⋯2k) cos^{2k}θ
        k = np.arange(1, df // 2)
        return float(s * (1 + np.cumprod((2 * k - 1) / (2 * k) * c2).sum()))
    # (2/π)(θ + sinθ cosθ · Σ_{k<(df−1)/2} (2·4⋯2k)/(3·5⋯(2k+1)) cos^{2k}θ)
    k = np.arange(1, (df - 1) // 2)
    series = 0.0 if df == 1 else 1 + np.cumprod(2 * k / (2 * k + 1) * c2).sum()
    return float(2 / math.pi * (theta + s * math.sqrt(c2) * series))


def _cornish_fisher(df: int, q: float) -> float:
    """Abramowitz & Stegun 26.7.5: the t quantile as a series in 1/df around the normal quantile."""
    x = normal_quantile(q)
    g1 = (x**3 + x) / 4
    g2 = (5 * x**5 + 16 * x**3 + 3 * x) / 96
    g3 = (3 * x**7 + 19 * x**5 + 17 * x**3 - 15 * x) / 384
    g4 = (79 * x**9 + 776 * x**7 + 1482 * x**5 - 1920 * x**3 - 945 * x) / 92160
    return x + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def seed_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """mean ± t_{(1+level)/2, n−1} · s/√n over per-seed values (n ≥ 2)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if len(v) < 2:
        raise ValueError(f"a t interval needs at least 2 seeds, got {len(v)}")
    if not np.isfinite(v).all():
        raise ValueError(f"a t interval needs finite values, got {v.tolist()}")
    _check_level(level)
    mean = float(v.mean())
    half = t_quantile(len(v) - 1, (1 + level) / 2) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return Interval(mean - half, mean + half, T_METHOD, len(v))


FIELLER_METHOD = "Fieller, t over seeds"


def fieller_interval(x: Sequence[float], y: Sequence[float], level: float = 0.95) -> Interval:
    """Fieller's interval (Fieller 1954) for the ratio of means mean(x) / mean(y) of paired per-seed values: the θ
    with (x̄ − θȳ)² ≤ t² · (s_xx − 2θ s_xy + θ² s_yy) / n, t on n − 1 degrees of freedom. Where the denominator's
    own t interval holds 0 the set is unbounded: (−inf, inf) — no ratio can be claimed."""
    x, y = (np.asarray(v, dtype=np.float64).ravel() for v in (x, y))
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"Fieller's interval needs ≥ 2 paired values, got {len(x)} and {len(y)}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("Fieller's interval needs finite values")
    _check_level(level)
    n, t2 = len(x), t_quantile(len(x) - 1, (1 + level) / 2) ** 2
    cov = np.cov(x, y, ddof=1)
    a = y.mean() ** 2 - t2 * cov[1, 1] / n
    b = x.mean() * y.mean() - t2 * cov[0, 1] / n
    c = x.mean() ** 2 - t2 * cov[0, 0] / n
    if a <= 0:
        return Interval(-math.inf, math.inf, FIELLER_METHOD, n)
    root = math.sqrt(max(0.0, b * b - a * c))
    return Interval(float((b - root) / a), float((b + root) / a), FIELLER_METHOD, n)


def log_seed_interval(ppls: Sequence[float], level: float = 0.95) -> Interval:
    """exp of the t interval over the per-seed log perplexities (mean log-losses): never a negative bound."""
    v = np.asarray(ppls, dtype=np.float64).ravel()
    if (v <= 0).any():
        raise ValueError(f"perplexities must be positive, got {v.tolist()}")
    iv = seed_interval(np.log(v), level)
    return Interval(math.exp(iv.lo), math.exp(iv.hi), LOG_T_METHOD, iv.n)


def block_length(n: int) -> int:
    """Windows per moving block: ⌈n^{1/3}⌉ (the order that minimises the bootstrap's variance error, Hall, Horowitz
    & Jing 1995)."""
    return max(1, math.ceil(n ** (1 / 3) - 1e-9))


def block_indices(n: int, rows: int, rng: np.random.Generator, block: int | None = None) -> np.ndarray:
    """(rows, n) resampled window indices: ⌈n / b⌉ runs of b consecutive windows each (b = ``block``, default
    block_length(n); b = 1 is the ordinary bootstrap), each starting anywhere (circularly), cut to n."""
    b = block or block_length(n)
    k = -(-n // b)
    starts = rng.integers(0, n, size=(rows, k, 1))
    return ((starts + np.arange(b)) % n).reshape(rows, k * b)[:, :n]


def ppl(nll: np.ndarray, tokens: np.ndarray) -> float:
    """exp(Σnll / Σtokens)."""
    nll, tokens = _windows(nll, tokens)
    return math.exp(nll.sum() / tokens.sum())


def bootstrap_ppl_interval(nll: np.ndarray, tokens: np.ndarray, level: float = 0.95, n_boot: int = 2000,
                           seed: int = 0, block: int | None = None) -> Interval:
    """Percentile moving-block bootstrap of exp(Σnll/Σtokens) over windows (:func:`block_indices`); deterministic
    per seed."""
    nll, tokens = _windows(nll, tokens)
    _check_level(level)
    stats = np.concatenate([np.exp(s / t) for (s,), t in _resampled_sums((nll,), tokens, n_boot, seed, block)])
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(lo), float(hi), BOOTSTRAP_METHOD, len(nll))


def ppl_interval(per_seed: Sequence[tuple[np.ndarray, np.ndarray]], level: float = 0.95, n_boot: int = 2000,
                 seed: int = 0) -> Interval:
    """Interval of one table row's perplexity from its seeds' (nll, tokens) per window: t over the per-seed mean
    log-losses (exponentiated) with ≥ 2 seeds, the block bootstrap over windows with one."""
    if len(per_seed) == 0:
        raise ValueError("no seeds to compute a perplexity interval from")
    if len(per_seed) == 1:
        return bootstrap_ppl_interval(*per_seed[0], level=level, n_boot=n_boot, seed=seed)
    return log_seed_interval([ppl(nll, tokens) for nll, tokens in per_seed], level)


def paired_difference(a: Mapping[int, tuple[np.ndarray, np.ndarray]], b: Mapping[int, tuple[np.ndarray, np.ndarray]],
                      level: float = 0.95, n_boot: int = 2000, seed: int = 0, block: int | None = None) -> Paired:
    """ppl_A − ppl_B over the seeds both have (seed → (nll, tokens) per window), which must have been evaluated on
    the same windows: a t interval over the per-seed differences with ≥ 2 common seeds; with one, a paired bootstrap
    that resamples the same windows for A and B."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"no seed in common to pair: A has seeds {sorted(a)}, B has {sorted(b)}")
    _check_level(level)
    pairs = []
    for s in common:
        nll_a, tok_a = _windows(*a[s])
        nll_b, tok_b = _windows(*b[s])
        if len(tok_a) != len(tok_b) or not np.array_equal(tok_a, tok_b):
            raise ValueError(f"A and B were evaluated on different windows (seed {s}: {len(tok_a)} windows, "
                             f"{tok_a.sum():g} tokens vs {len(tok_b)} windows, {tok_b.sum():g} tokens)")
        pairs.append((nll_a, nll_b, tok_a))
    ppls = np.array([[ppl(nll_a, tok), ppl(nll_b, tok)] for nll_a, nll_b, tok in pairs])
    diff, ratio = float((ppls[:, 0] - ppls[:, 1]).mean()), float((ppls[:, 0] / ppls[:, 1]).mean())
    if len(pairs) >= 2:
        d = ppls[:, 0] - ppls[:, 1]
        return Paired(diff, ratio, seed_interval(d, level), t_p_value(d))
    nll_a, nll_b, tok = pairs[0]
    stats = np.concatenate([np.exp(sa / t) - np.exp(sb / t)
                            for (sa, sb), t in _resampled_sums((nll_a, nll_b), tok, n_boot, seed, block)])
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return Paired(diff, ratio, Interval(float(lo), float(hi), BOOTSTRAP_METHOD, len(tok)), bootstrap_p_value(stats))


def t_p_value(values: np.ndarray) -> float:
    """Two-sided p-value of a one-sample t test of mean 0 (1.0 when every value is 0, 0.0 when all are equal and
    not 0)."""
    v = np.asarray(values, dtype=np.float64)
    sd = float(v.std(ddof=1))
    if sd == 0:
        return 1.0 if float(v.mean()) == 0 else 0.0
    t = abs(float(v.mean())) / (sd / math.sqrt(len(v)))
    return max(0.0, 1.0 - _t_central(t, len(v) - 1))


def bootstrap_p_value(stats: np.ndarray) -> float:
    """Two-sided bootstrap p-value of 0: twice the smaller share of resamples on either side of 0, at most 1."""
    s = np.asarray(stats, dtype=np.float64)
    return float(min(1.0, 2 * min((s <= 0).mean(), (s >= 0).mean())))


def holm_rejected(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure (Holm 1979): the hypotheses rejected at family-wise level ``alpha``, in input
    order. The i-th smallest p-value (from 0) is compared with alpha / (m − i) until the first that is not below."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        out[i] = True
    return out


@dataclass(frozen=True)
class Gain:
    """Context use: the mean loss of a position range past L minus the mean loss of [L/2, L) in L windows."""

    loss: float
    ref_loss: float
    gain: float  # loss − ref_loss, nats per token
    interval: Interval  # of gain, over blocks


def context_gain(nll: np.ndarray, count: np.ndarray, ref_nll: np.ndarray, ref_count: np.ndarray,
                 level: float = 0.95, n_boot: int = 2000, seed: int = 0) -> Gain:
    """Per block of the evaluated text (blocks: (n,) sums of each side over the same tokens), Σnll/Σcount minus
    Σref_nll/Σref_count, with a percentile moving-block bootstrap over the blocks, paired."""
    x = [np.asarray(a, dtype=np.float64).ravel() for a in (nll, count, ref_nll, ref_count)]
    if len({len(a) for a in x}) != 1 or len(x[0]) == 0 or x[1].sum() <= 0 or x[3].sum() <= 0:
        raise ValueError("need one sum per block on both sides and tokens scored on both")
    _check_level(level)
    loss, ref = x[0].sum() / x[1].sum(), x[2].sum() / x[3].sum()
    idx = block_indices(len(x[0]), n_boot, np.random.default_rng(seed))
    s = [a[idx].sum(axis=1) for a in x]
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = s[0] / s[1] - s[2] / s[3]
    boot = boot[np.isfinite(boot)]
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return Gain(float(loss), float(ref), float(loss - ref), Interval(float(lo), float(hi), BOOTSTRAP_METHOD, len(x[0])))


CONTRAST_BLOCK_TOKENS = 16384  # a one-seed contrast's bootstrap blocks: at least this many scored tokens each
CONTRAST_MIN_BLOCKS = 10  # fewer blocks than this: no one-seed interval (the bootstrap cannot see the spread)


@dataclass(frozen=True)
class Contrast:
    """A paired truncation contrast: the same model's loss on the same scored tokens with more context minus with
    less (nats per token; negative: the extra context helps), its ratio exp(·) and the interval of the difference
    (None where one seed's tokens are too few for blocks of CONTRAST_BLOCK_TOKENS)."""

    value: float
    ratio: float
    interval: Interval | None
    seeds: int
    tokens: int  # scored per seed


def truncation_contrast(per_seed: Mapping[int, tuple[np.ndarray, np.ndarray, np.ndarray]], level: float = 0.95,
                        n_boot: int = 2000, seed: int = 0) -> Contrast:
    """seed → (nll with more context, nll with less, tokens) per window, the same windows on both sides: the mean
    over seeds of Σ(nll_more − nll_less) / Σtokens. Interval: t over the seeds with ≥ 2; with one, a paired
    moving-block bootstrap over blocks of ≥ CONTRAST_BLOCK_TOKENS tokens (the same block size at every length), None
    where that leaves fewer than CONTRAST_MIN_BLOCKS blocks."""
    if not per_seed:
        raise ValueError("no seeds to contrast")
    _check_level(level)
    values, tokens = [], 0
    for s in sorted(per_seed):
        more, less, tok = (np.asarray(a, dtype=np.float64).ravel() for a in per_seed[s])
        if not len(more) == len(less) == len(tok) or tok.sum() <= 0:
            raise ValueError(f"seed {s}: the two sides must hold one nll per window of the same tokens")
        values.append((more.sum() - less.sum()) / tok.sum())
        tokens = int(tok.sum())
    value = float(np.mean(values))
    if len(values) >= 2:
        return Contrast(value, math.exp(value), seed_interval(values, level), len(values), tokens)
    block = _contrast_block(tok)
    if block is None:
        return Contrast(value, math.exp(value), None, 1, tokens)
    boot = np.concatenate([(a - b) / t for (a, b), t in _resampled_sums((more, less), tok, n_boot, seed, block)])
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return Contrast(value, math.exp(value), Interval(float(lo), float(hi), BOOTSTRAP_METHOD, len(tok)), 1, tokens)


def contrast_ratio(a: np.ndarray, b: np.ndarray, c: np.ndarray, tokens: np.ndarray, level: float = 0.95,
                   n_boot: int = 2000, seed: int = 0) -> Interval | None:
    """The 95 % interval of (Σa − Σb) / (Σa − Σc) — one seed's ratio of two paired contrasts on the same windows
    (``a``, ``b``, ``c``: summed nll per window; ``tokens`` per window), by a paired moving-block bootstrap over
    blocks of ≥ CONTRAST_BLOCK_TOKENS tokens: the percentile interval, or (−inf, inf) where the denominator's own
    interval holds 0 (as Fieller's); None on fewer than CONTRAST_MIN_BLOCKS blocks."""
    _check_level(level)
    a, b, c, tokens = (np.asarray(x, dtype=np.float64).ravel() for x in (a, b, c, tokens))
    if not len(a) == len(b) == len(c) == len(tokens) or tokens.sum() <= 0:
        raise ValueError("the three sides must hold one nll per window of the same tokens")
    block = _contrast_block(tokens)
    if block is None:
        return None
    num, den = [], []
    for (sa, sb, sc), _ in _resampled_sums((a, b, c), tokens, n_boot, seed, block):
        num.append(sa - sb)
        den.append(sa - sc)
    num, den = np.concatenate(num), np.concatenate(den)
    q = [(1 - level) / 2, (1 + level) / 2]
    d_lo, d_hi = np.quantile(den, q)
    if d_lo <= 0 <= d_hi:
        return Interval(-math.inf, math.inf, BOOTSTRAP_METHOD, len(tokens))
    lo, hi = np.quantile(num / den, q)
    return Interval(float(lo), float(hi), BOOTSTRAP_METHOD, len(tokens))


def _contrast_block(tokens: np.ndarray) -> int | None:
    """Windows per bootstrap block of a one-seed contrast (≥ CONTRAST_BLOCK_TOKENS tokens a block, the same block
    size at every length); None where the windows make fewer than CONTRAST_MIN_BLOCKS blocks."""
    block = max(1, math.ceil(CONTRAST_BLOCK_TOKENS / (tokens.sum() / len(tokens))))
    return None if len(tokens) // block < CONTRAST_MIN_BLOCKS else block


def _resampled_sums(arrays: tuple[np.ndarray, ...], tokens: np.ndarray, n_boot: int, seed: int,
                    block: int | None = None) -> Iterator[tuple[tuple[np.ndarray, ...], np.ndarray]]:
    """Per chunk of bootstrap resamples: the sums of each array and of tokens over the same resampled windows."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be ≥ 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    n = len(tokens)
    rows = max(1, MAX_DRAWS // n)
    for start in range(0, n_boot, rows):
        idx = block_indices(n, min(rows, n_boot - start), rng, block)
        yield tuple(x[idx].sum(axis=1) for x in arrays), tokens[idx].sum(axis=1)


def _windows(nll: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validated 1-D float64 copies of per-window nll and token counts."""
    nll, tokens = np.asarray(nll, dtype=np.float64).ravel(), np.asarray(tokens, dtype=np.float64).ravel()
    if len(nll) == 0 or len(nll) != len(tokens):
        raise ValueError(f"need one nll and one token count per window, got {len(nll)} and {len(tokens)}")
    if (tokens < 0).any() or tokens.sum() <= 0:
        raise ValueError("token counts must be non-negative with a positive total")
    return nll, tokens


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")


WILSON_METHOD = "Wilson over examples"
MCNEMAR_METHOD = "paired bootstrap over examples (McNemar)"


def wilson_interval(solved: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval of a proportion solved/n (Wilson 1927): the z-test inverted, which stays inside [0, 1]
    and keeps its coverage at 0 % and 100 %, unlike p ± z·√(p(1−p)/n)."""
    if n < 1 or not 0 <= solved <= n:
        raise ValueError(f"need 0 ≤ solved ≤ n and n ≥ 1, got solved={solved}, n={n}")
    _check_level(level)
    z = normal_quantile((1 + level) / 2)
    p = solved / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo = 0.0 if solved == 0 else max(0.0, centre - half)
    hi = 1.0 if solved == n else min(1.0, centre + half)
    return Interval(lo, hi, WILSON_METHOD, n)


def accuracy_interval(per_seed: Sequence[tuple[int, int]], level: float = 0.95) -> Interval:
    """Interval of one table cell's accuracy from its seeds' (solved, examples): Wilson with one seed; with ≥ 2 the t
    interval over the per-seed accuracies, clipped to [0, 1] and widened to at least the Wilson interval of all the
    seeds' examples pooled (seeds that agree exactly — all at 100 % — still leave the examples' uncertainty)."""
    if len(per_seed) == 0:
        raise ValueError("no seeds to compute an accuracy interval from")
    if len(per_seed) == 1:
        return wilson_interval(*per_seed[0], level=level)
    t = seed_interval([s / n for s, n in per_seed], level)
    pooled = wilson_interval(sum(s for s, _ in per_seed), sum(n for _, n in per_seed), level)
    return Interval(max(0.0, min(t.lo, pooled.lo)), min(1.0, max(t.hi, pooled.hi)), T_METHOD, len(per_seed))


@dataclass(frozen=True)
class PairedAccuracy:
    """acc_A − acc_B on the same held-out examples, over paired seeds (or, with one seed, over the examples)."""

    diff: float  # mean over paired seeds of acc_A − acc_B
    interval: Interval  # of diff
    only_a: int  # examples A solves and B does not (summed over the paired seeds)
    only_b: int
    p_value: float | None  # McNemar's exact test (one seed); None with several (the t interval decides)

    @property
    def verdict(self) -> str:
        """'higher' (A solves more than B), 'lower', or 'indistinguishable': by McNemar's exact test at 5 % with one
        seed (the percentile bootstrap is too liberal when few examples differ), by the t interval with several."""
        if self.p_value is not None:
            return "indistinguishable" if self.p_value >= 0.05 else "higher" if self.diff > 0 else "lower"
        return "higher" if self.interval.lo > 0 else "lower" if self.interval.hi < 0 else "indistinguishable"


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar test: under H0 each discordant example is A's or B's with probability 1/2."""
    m = only_a + only_b
    if m == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(m, i) for i in range(k + 1)) / 2**m
    return min(1.0, 2 * tail)


def paired_accuracy(a: Mapping[int, np.ndarray], b: Mapping[int, np.ndarray], level: float = 0.95,
                    n_boot: int = 2000, seed: int = 0) -> PairedAccuracy:
    """acc_A − acc_B over the seeds both have (seed → solved flags per held-out example, the same examples in the
    same order): a t interval over the per-seed differences with ≥ 2 common seeds; with one, McNemar's exact test and
    a paired bootstrap interval that resamples the same examples for A and B."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"no seed in common to pair: A has seeds {sorted(a)}, B has {sorted(b)}")
    _check_level(level)
    pairs = []
    for s in common:
        x, y = np.asarray(a[s], dtype=bool), np.asarray(b[s], dtype=bool)
        if x.shape != y.shape or x.ndim != 1 or len(x) == 0:
            raise ValueError(f"A and B were scored on different examples (seed {s}: {x.size} vs {y.size})")
        pairs.append((x, y))
    diffs = np.array([x.mean() - y.mean() for x, y in pairs])
    only_a = int(sum((x & ~y).sum() for x, y in pairs))
    only_b = int(sum((~x & y).sum() for x, y in pairs))
    if len(pairs) >= 2:
        return PairedAccuracy(float(diffs.mean()), seed_interval(diffs, level), only_a, only_b, None)
    x, y = pairs[0]
    d = x.astype(np.float64) - y.astype(np.float64)
    rng = np.random.default_rng(seed)
    stats = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(axis=1)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return PairedAccuracy(float(d.mean()), Interval(float(lo), float(hi), MCNEMAR_METHOD, len(d)), only_a, only_b,
                          mcnemar_exact(only_a, only_b))
