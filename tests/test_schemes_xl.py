"""Transformer-XL relative attention (Dai et al. 2019, §3.3): the extra logits u·k_j + q_i·W_R R_{i−j} +
v·W_R R_{i−j} (all / √d) recomputed here in float64 from the module's parameters and a sinusoidal table written
out by hand; their dtype; the initialisation; and the table kept between calls outside autograd."""

import math

import pytest
import torch

import pe_bench.schemes.xl as xl
from pe_bench.schemes import ModelShape
from pe_bench.schemes.xl import TransformerXL, XLOptions

H, D, C = 4, 8, 32


def make(seed=0, **options):
    torch.manual_seed(seed)
    s = TransformerXL(XLOptions(**options), ModelShape(d_model=C, n_heads=H, head_dim=D, train_seq_len=16,
                                                       n_layers=2))
    with torch.no_grad():  # a trained-looking scale, so every term matters
        for p in s.parameters():
            p.normal_(0, 0.5)
    return s


def terms_by_hand(s, q, k, layer, base):
    """(u·k_j + (q_i + v)·W_R R_{i−j}) / √d for j <= i, float64; R_r[2m] = sin(r/base^(2m/C)), R_r[2m+1] = cos."""
    q, k = q.double(), k.double()
    B, _, T, _ = q.shape
    W = s.r_proj[layer].detach().double()  # (C, H·D)
    u, v = s.u.detach().double(), s.v.detach().double()
    out = torch.zeros(B, H, T, T, dtype=torch.float64)
    for i in range(T):
        for j in range(i + 1):
            r = i - j
            R = torch.tensor([f(r / base ** (2 * (c // 2) / C)) for c, f in
                              zip(range(C), [math.sin, math.cos] * (C // 2))], dtype=torch.float64)
            WR = (R @ W).view(H, D)
            out[:, :, i, j] = (torch.einsum("hd,bhd->bh", u, k[:, :, j]) +
                               torch.einsum("bhd,hd->bh", q[:, :, i] + v, WR)) / math.sqrt(D)
    return out


def qk(T, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, H, T, D, generator=g).to(dtype), torch.randn(2, H, T, D, generator=g).to(dtype)


def causal(x):
    return torch.tril(x)


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_score_terms_are_the_papers_terms_b_c_d(grad, base):
    s = make(base=base)
    q, k = qk(7)
    pos = torch.arange(7)
    with torch.set_grad_enabled(grad):
        got = s.score_terms(q, k, pos, pos, 1)
    torch.testing.assert_close(causal(got.double()), terms_by_hand(s, q, k, 1, base), rtol=1e-5, atol=1e-5)


def test_score_terms_in_float64_are_computed_in_float64():
    """q and k in float64 (a float32 module): the terms come back in float64 (R itself is tabulated in float32)."""
    s = make()
    q, k = qk(6, torch.float64)
    pos = torch.arange(6)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            got = s.score_terms(q, k, pos, pos, 0)
        assert got.dtype == torch.float64
        torch.testing.assert_close(causal(got), terms_by_hand(s, q, k, 0, 10000.0), rtol=1e-6, atol=1e-6)


def test_score_terms_in_bfloat16_stay_in_bfloat16():
    s = make()
    q, k = qk(6, torch.bfloat16)
    pos = torch.arange(6)
    got = s.score_terms(q, k, pos, pos, 0)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(causal(got.double()), terms_by_hand(s, q, k, 0, 10000.0), rtol=0.05, atol=0.1)


def test_parameters_start_at_init_std():
    """W_R, u and v are drawn N(0, init_std²)."""
    torch.manual_seed(0)
    s = TransformerXL(XLOptions(init_std=0.05), ModelShape(d_model=64, n_heads=4, head_dim=16, train_seq_len=16,
                                                           n_layers=2))
    for p in (s.r_proj, s.u, s.v):
        assert 0.035 < p.detach().std().item() < 0.065


def test_two_backward_passes_over_unchanged_weights_accumulate_the_gradients():
    """Gradient accumulation: two micro-batches before a step run score_terms twice on the same W_R; each backward
    must go through its own graph (no table kept from the first pass) and the gradients add up."""
    s = make()
    q, k = qk(5)
    pos = torch.arange(5)
    s.score_terms(q, k, pos, pos, 0).sum().backward()
    once = s.r_proj.grad.clone()
    s.score_terms(q, k, pos, pos, 0).sum().backward()
    torch.testing.assert_close(s.r_proj.grad, 2 * once)


def test_outside_autograd_the_table_is_kept_sized_to_a_power_of_two_and_recomputed_when_it_must_be(monkeypatch):
    """The docstring's promise: the last layer's W_R·R table is kept for a power of two ≥ n distances (the smallest:
    at most twice what is needed) while W_R holds the same values; a longer window, another layer, another dtype or
    new W_R values compute it again. Every call's terms stay those of the paper."""
    computed = []
    sinusoid_table = xl.sinusoid_table

    def counting(positions, dim, base=10000.0):
        computed.append(positions.shape[0])
        return sinusoid_table(positions, dim, base)

    monkeypatch.setattr(xl, "sinusoid_table", counting)
    s = make()
    steps = [  # (window T, layer, dtype, rows computed by this call)
        (2, 0, torch.float32, [2]), (5, 0, torch.float32, [8]), (5, 0, torch.float32, []),
        (8, 0, torch.float32, []), (9, 0, torch.float32, [16]), (3, 0, torch.float32, []),
        (3, 1, torch.float32, [4]), (3, 1, torch.float64, [4]), (4, 1, torch.float64, []),
    ]
    with torch.no_grad():
        for T, layer, dtype, rows in steps:
            computed.clear()
            q, k = qk(T, dtype, seed=T)
            pos = torch.arange(T)
            got = s.score_terms(q, k, pos, pos, layer)
            assert computed == rows, (T, layer, dtype)
            assert got.dtype == dtype
            torch.testing.assert_close(causal(got.double()), terms_by_hand(s, q, k, layer, 10000.0), rtol=1e-5,
                                       atol=1e-5)
        s.r_proj[1].mul_(-1.5)  # an optimizer step, in place
        computed.clear()
        q, k = qk(4, torch.float64)
        got = s.score_terms(q, k, torch.arange(4), torch.arange(4), 1)
        assert computed == [4]
        torch.testing.assert_close(causal(got), terms_by_hand(s, q, k, 1, 10000.0), rtol=1e-6, atol=1e-6)
