"""Sandwich (Chi et al. 2023, §5; NeMo's implementation): the bias against the paper's sum of cosines, computed
independently in Python floats."""

import math

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.sandwich import Sandwich, SandwichOptions, sandwich_bias


def paper_bias(distance, dim, n_heads, base=10000.0, compression=8.0):
    """b_h(d) = (Σ_{k=1}^{⌊d'/2⌋} cos(d / base^(2k/d')) − d'/2) / (compression · h / H), h = 1..H; (H,) floats."""
    s = math.fsum(math.cos(distance / base ** (2 * k / dim)) for k in range(1, dim // 2 + 1)) - dim / 2
    return [s / (compression * h / n_heads) for h in range(1, n_heads + 1)]


def reference(distance, dim, n_heads, base=10000.0, compression=8.0):
    """(H, Tq, Tk) float64 from paper_bias, entry by entry."""
    per = {d: paper_bias(d, dim, n_heads, base, compression) for d in set(distance.flatten().tolist())}
    return torch.tensor([[[per[d][h] for d in row] for row in distance.tolist()] for h in range(n_heads)],
                        dtype=torch.float64)


def test_sandwich_bias_defaults_are_the_papers_base_and_compression():
    distance = torch.tensor([[0, 3, 17], [40, 120, 511]])
    got = sandwich_bias(distance, 32, 4)
    assert got.shape == (4, 2, 3) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), reference(distance, 32, 4), rtol=2e-7, atol=0)


def test_sandwich_bias_is_computed_in_float64_and_rounded_once():
    """Far distances (thousands) with many frequencies: a float32 frequency or head divisor would be off by far more
    than float32's rounding of the final value. Head divisors compression·h/H = 1.3·h/7 are not float32-exact."""
    distance = torch.tensor([[0, 1, 2, 999, 2047, 4093, 6000, 8191]])
    got = sandwich_bias(distance, 128, 7, 10000.0, 1.3)
    want = reference(distance, 128, 7, 10000.0, 1.3).float()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_sandwich_scheme_uses_its_options_and_the_model_width():
    shape = ModelShape(d_model=24, n_heads=3, head_dim=8, train_seq_len=16)
    pos = torch.arange(30, 50)
    for options, dim in [(SandwichOptions(), 24), (SandwichOptions(dim=10, base=300.0, compression=2.5), 10)]:
        got = Sandwich(options, shape).score_bias(pos, pos)
        distance = (pos[:, None] - pos[None, :]).clamp(min=0)
        want = reference(distance, dim, 3, options.base, options.compression)
        torch.testing.assert_close(got.double(), want, rtol=2e-7, atol=1e-7)


@pytest.mark.parametrize("d_model,n_heads", [(15, 3), (24, 4)])
def test_sandwich_bias_is_never_positive_and_zero_at_distance_zero_for_even_widths(d_model, n_heads):
    """Each cosine is <= 1 and there are ⌊d'/2⌋ <= d'/2 of them: the bias only ever penalises."""
    shape = ModelShape(d_model=d_model, n_heads=n_heads, head_dim=d_model // n_heads, train_seq_len=16)
    pos = torch.arange(40)
    bias = Sandwich(SandwichOptions(), shape).score_bias(pos, pos)
    assert (bias <= 0).all()
    if d_model % 2 == 0:
        assert (bias[:, torch.arange(40), torch.arange(40)] == 0).all()
