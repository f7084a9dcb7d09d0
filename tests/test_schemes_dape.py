"""DAPE (Zheng et al. 2024, arXiv:2405.14722, eq. 5): terms = B + f(q·k/√d, B), with the base bias B and the MLP f of
the layer being computed, and the scheme relative exactly when its base is."""

from __future__ import annotations

import math

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.dape import DAPE, DAPEOptions


def _shape(n_layers: int = 2) -> ModelShape:
    return ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=8, n_layers=n_layers)


@pytest.mark.parametrize("base, relative", [("alibi", True), ("kerple_log", True), ("t5", True), ("fire", False)])
def test_dape_is_relative_exactly_when_its_base_bias_is(base, relative):
    """The MLP sees (logit, bias) at one (i, j): with a relative base the terms depend on i − j only, so DAPE is
    relative (``relative`` and ``bias_by_distance`` say True); FIRE's normaliser reads the query position, so not."""
    torch.manual_seed(0)
    s = DAPE(DAPEOptions(base=base), _shape())
    assert s.relative is relative and s.bias_by_distance() is relative
    if base == "fire":
        with torch.no_grad():
            for layer in s.base.layers:
                layer.init_threshold.fill_(2.0)  # positions past L = 2: the normaliser grows with i
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 6, 8, generator=g), torch.randn(1, 2, 6, 8, generator=g)
    pos = torch.arange(6)
    with torch.no_grad():
        here, shifted = s.score_terms(q, k, pos, pos, 1), s.score_terms(q, k, pos + 9, pos + 9, 1)
    causal = (pos[None, :] <= pos[:, None]).expand_as(here)
    same = torch.allclose(here[causal], shifted[causal], atol=1e-5, rtol=0)
    assert same is relative


def test_dape_uses_the_base_bias_of_the_layer_being_computed():
    """KERPLE-log base, per layer (b_h = −r1_h·ln(1 + r2_h·(i − j)) with layer 1's own r1, r2): layer 1's terms are
    B₁ + f₁(q·k/√d, B₁) by hand in float64, not built from layer 0's bias."""
    torch.manual_seed(0)
    s = DAPE(DAPEOptions(base="kerple_log", mlp_width=5), _shape())
    with torch.no_grad():
        s.base.r1.copy_(torch.tensor([[0.5, 1.5], [3.0, 0.25]]))
        s.base.r2.copy_(torch.tensor([[0.2, 0.9], [2.0, 0.05]]))
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 2, 7, 8, generator=g), torch.randn(1, 2, 7, 8, generator=g)
    pos = torch.arange(7)
    terms = s.score_terms(q, k, pos, pos, 1).detach().double()
    r1, r2 = s.base.r1.detach().double()[1], s.base.r2.detach().double()[1]
    lin1, lin2 = s.mlps[1][0], s.mlps[1][2]
    w1, b1, w2, b2 = (t.detach().double() for t in (lin1.weight, lin1.bias, lin2.weight, lin2.bias))
    for i in range(7):
        for j in range(i + 1):
            bias = -r1 * torch.log(1 + r2 * (i - j))
            logits = (q[0, :, i].double() * k[0, :, j].double()).sum(-1) / math.sqrt(8)
            h = w1 @ torch.cat([logits, bias]) + b1
            expected = bias + w2 @ torch.where(h > 0, h, 0.01 * h) + b2
            torch.testing.assert_close(terms[0, :, i, j], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("base", ["alibi", "kerple_log", "t5", "fire"])
def test_dape_evaluates_the_same_terms_without_the_feature_copy(base):
    """Outside autograd the MLP's first matrix is applied by its logit and bias halves across heads (no
    (B, Tq, Tk, 2H) copy): the terms it trains with, to 1e-5, for a batch and a block of query rows."""
    torch.manual_seed(0)
    s = DAPE(DAPEOptions(base=base), ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=8, n_layers=2))
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(3, 4, 5, 8, generator=g), torch.randn(3, 4, 12, 8, generator=g)
    q_pos, k_pos = torch.arange(7, 12), torch.arange(12)
    trained = s.score_terms(q, k, q_pos, k_pos, 1)
    assert trained.requires_grad
    with torch.no_grad():
        evaluated = s.score_terms(q, k, q_pos, k_pos, 1)
    torch.testing.assert_close(evaluated, trained.detach(), rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # a part kept from the last call is not reused once the weights moved (a training step)
        s.mlps[1][0].weight.add_(0.1)
        for p in s.base.parameters():
            p.add_(0.1)
        moved = s.score_terms(q, k, q_pos, k_pos, 1)
    torch.testing.assert_close(moved, s.score_terms(q, k, q_pos, k_pos, 1).detach(), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(moved, evaluated)
