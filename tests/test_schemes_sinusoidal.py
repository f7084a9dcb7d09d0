"""Sinusoidal absolute positions (Vaswani et al. 2017, §3.5): the table against the paper's formula, and the scheme's
scale, base and dtype handling."""

import math

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.sinusoidal import Sinusoidal, SinusoidalOptions, sinusoid_table

SHAPE = ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=32)


def paper_table(positions, dim, base=10000.0):
    """PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(p / base^(2i/d)), in Python floats (float64)."""
    rows = []
    for p in positions:
        row = []
        for c in range(dim):
            angle = p / base ** ((c - c % 2) / dim)
            row.append(math.sin(angle) if c % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def test_sinusoid_table_matches_the_paper_formula_to_float32_precision_at_far_positions():
    """The angles are computed in float64: at position 5000 a float32 angle would be off by ~1e-3."""
    positions = [0, 1, 7, 999, 4093, 5000]
    got = sinusoid_table(torch.tensor(positions), 32)
    assert got.dtype == torch.float32 and got.shape == (6, 32)
    torch.testing.assert_close(got.double(), paper_table(positions, 32), rtol=0, atol=2e-7)


def test_sinusoidal_default_scale_is_one_over_sqrt_d_model():
    s = Sinusoidal(SinusoidalOptions(), SHAPE)
    x = torch.zeros(1, 5, 16)
    out = s.embed(x, torch.arange(5))
    torch.testing.assert_close(out[0].double(), paper_table(range(5), 16) / math.sqrt(16), rtol=0, atol=1e-7)


def test_sinusoidal_embed_adds_the_scaled_table_to_the_token_embeddings():
    torch.manual_seed(0)
    s = Sinusoidal(SinusoidalOptions(scale=2.5, base=500.0), SHAPE)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    positions = torch.arange(10, 16)
    out = s.embed(x, positions)
    torch.testing.assert_close(out - x, (2.5 * paper_table(range(10, 16), 16, 500.0).float().double()).expand(2, 6, 16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_sinusoidal_embed_keeps_the_embeddings_dtype(dtype):
    s = Sinusoidal(SinusoidalOptions(), SHAPE)
    x = torch.zeros(1, 4, 16, dtype=dtype)
    out = s.embed(x, torch.arange(4))
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), (sinusoid_table(torch.arange(4), 16) / 4).to(dtype).float()[None])


def test_sinusoidal_keeps_the_model_shape_it_was_built_for():
    assert Sinusoidal(SinusoidalOptions(), SHAPE).shape == SHAPE
