"""FIRE (Li et al. 2024, arXiv:2310.04418, eq. 4–6): b_h(i, j) = f_θ(ψ(i − j) / (ψ(max(L, i)) + ε)), ψ(x) = ln(|c·x| + 1),
f_θ = Linear(1 → W), ReLU, Linear(W → H), one module per layer; outside autograd computed by blocks of query rows
whose hidden layer fits HIDDEN_BUDGET numbers."""

from __future__ import annotations

import math

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes import fire as fire_mod
from pe_bench.schemes.fire import Fire, FireOptions


def _fire(n_layers: int = 2, L: int = 8, **options) -> Fire:
    torch.manual_seed(0)
    f = Fire(FireOptions(**options), ModelShape(d_model=16, n_heads=3, head_dim=8, train_seq_len=L, n_layers=n_layers))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every layer its own c, L multiplier and MLP
        for n, layer in enumerate(f.layers):
            layer.c.fill_(0.3 + 0.4 * n)
            layer.threshold_multiplier.fill_(1.0 - 0.25 * n)
            for p in layer.mlp.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    return f


def _fire_by_hand(layer, q_pos, k_pos) -> torch.Tensor:
    """eq. 4–6 in float64 from the layer's parameters, pair by pair: (H, Tq, Tk)."""
    c = abs(layer.c.item())
    L = abs(layer.threshold_multiplier.item() * layer.init_threshold.item())
    w1, b1, w2, b2 = (t.detach().double() for t in (layer.mlp[0].weight[:, 0], layer.mlp[0].bias,
                                                    layer.mlp[2].weight, layer.mlp[2].bias))
    out = torch.empty(w2.shape[0], len(q_pos), len(k_pos), dtype=torch.float64)
    for a, i in enumerate(q_pos.tolist()):
        for b, j in enumerate(k_pos.tolist()):
            x = math.log(c * max(i - j, 0) + 1) / (math.log(c * max(L, i) + 1) + layer.eps)
            out[:, a, b] = w2 @ torch.relu(w1 * x + b1) + b2
    return out


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("budget", [2**20, 40, 7], ids=["all-rows", "blocks", "row-by-row"])
def test_fire_bias_matches_eq_4_to_6_by_hand_for_each_layer(grad, budget, monkeypatch):
    """Every (i, j) of each layer's bias (future keys at distance 0), queries past and before L, a block of query
    rows that does not start at 0 — computed at once, by blocks of rows or row by row outside autograd."""
    monkeypatch.setattr(fire_mod, "HIDDEN_BUDGET", budget)
    f = _fire(L=8, mlp_width=4)
    k_pos = torch.arange(13)
    for q_pos in (k_pos, k_pos[3:11]):
        for layer in (0, 1):
            with torch.set_grad_enabled(grad):
                got = f.score_bias(q_pos, k_pos, layer)
            assert got.shape == (3, len(q_pos), 13) and got.dtype == torch.float32
            torch.testing.assert_close(got.detach().double(), _fire_by_hand(f.layers[layer], q_pos, k_pos),
                                       atol=1e-5, rtol=1e-5)


def test_fire_score_bias_defaults_to_the_first_layer():
    f = _fire(n_layers=2)
    pos = torch.arange(6)
    torch.testing.assert_close(f.score_bias(pos, pos), f.layers[0](pos, pos), atol=0, rtol=0)
    one = _fire(n_layers=1)
    torch.testing.assert_close(one.score_bias(pos, pos), _fire_by_hand(one.layers[0], pos, pos).float(),
                               atol=1e-5, rtol=1e-5)


def _identity_mlp(layer) -> None:
    """c = 0.1, threshold multiplier 1, and f_θ(x) = relu(x) (width 1, unit weights, zero biases): the bias reads
    the normalised distance itself."""
    with torch.no_grad():
        layer.c.fill_(0.1), layer.threshold_multiplier.fill_(1.0)
        layer.mlp[0].weight.fill_(1.0), layer.mlp[0].bias.zero_(), layer.mlp[2].weight.fill_(1.0)
        layer.mlp[2].bias.zero_()


def test_fire_adds_eps_to_the_normaliser():
    """ψ(i − j) / (ψ(max(L, i)) + ε), with a large ε to see it: f_θ made the identity on [0, 1] reads the input."""
    f = _fire(n_layers=1, L=4, mlp_width=1, eps=0.5)
    _identity_mlp(f.layers[0])
    pos = torch.arange(20)
    b = f.score_bias(pos, pos)[0]
    assert b[10, 3].item() == pytest.approx(math.log(1.7) / (math.log(2.0) + 0.5), rel=1e-6)
    assert b[2, 0].item() == pytest.approx(math.log(1.2) / (math.log(1.4) + 0.5), rel=1e-6)  # i < L


def test_fire_normalised_distance_stays_in_0_1_at_any_length():
    """The point of progressive interpolation: the MLP's input is in [0, 1] at every query position (the farthest
    key gives ψ(i)/(ψ(i) + ε), just under 1), default ε = 1e-6."""
    f = _fire(n_layers=1, L=16, mlp_width=1)
    _identity_mlp(f.layers[0])
    pos = torch.arange(3000)
    with torch.no_grad():
        b = f.score_bias(pos[-50:], pos)[0]
    assert b.min().item() >= 0.0 and b.max().item() <= 1.0
    assert b[:, 0].min().item() == pytest.approx(1.0, abs=1e-5)


def _blocks(layer, q_pos, k_pos):
    """The query rows of each call of the layer's all-rows ``bias`` made by one forward."""
    calls, real = [], layer.bias

    def spy(q, k):
        assert torch.equal(k, k_pos)
        calls.append(q.tolist())
        return real(q, k)

    layer.bias = spy
    try:
        out = layer(q_pos, k_pos)
    finally:
        del layer.bias
    return calls, out


@pytest.mark.parametrize("budget, width, keys, queries", [
    (64, 4, 8, 10),  # 64 // 32 = 2 rows a block, 5 blocks
    (100, 4, 8, 10),  # 3 rows a block: 3, 3, 3, 1
    (7, 4, 8, 5),  # one row alone is over the budget: one row at a time
    (4, 1, 1, 3),  # 1 key, width 1: 4 rows fit, all 3 at once
    (2, 1, 1, 3),  # 2 rows a block: 2, 1
])
def test_fire_outside_autograd_computes_the_largest_blocks_of_rows_within_the_budget(monkeypatch, budget, width, keys,
                                                                                     queries):
    """Outside autograd the hidden layer (width numbers per (query, key) pair) of one block never holds more than
    HIDDEN_BUDGET numbers — a single row at least — and blocks are as large as that allows, consecutive, in order,
    covering every query row once; with autograd all rows go in one call (one graph)."""
    monkeypatch.setattr(fire_mod, "HIDDEN_BUDGET", budget)
    f = _fire(n_layers=1, mlp_width=width)
    layer = f.layers[0]
    q_pos, k_pos = torch.arange(queries) + 2, torch.arange(keys)
    rows = max(1, budget // (keys * width))
    with torch.no_grad():
        calls, out = _blocks(layer, q_pos, k_pos)
    assert calls == [q_pos[i:i + rows].tolist() for i in range(0, queries, rows)]
    torch.testing.assert_close(out.double(), _fire_by_hand(layer, q_pos, k_pos), atol=1e-5, rtol=1e-5)
    calls, out = _blocks(layer, q_pos, k_pos)
    assert calls == [q_pos.tolist()] and out.requires_grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fire_blocks_of_rows_stay_on_the_positions_device(monkeypatch):
    """The blocked path (outside autograd) builds its output on the positions' device, as the all-rows path does."""
    monkeypatch.setattr(fire_mod, "HIDDEN_BUDGET", 64)  # 64 // (10 keys · 4) = 1 row a block
    f = _fire(n_layers=1, mlp_width=4)
    pos = torch.arange(10)
    expected = _fire_by_hand(f.layers[0], pos, pos)
    f, pos = f.cuda(), pos.cuda()
    with torch.no_grad():
        got = f.score_bias(pos, pos)
    assert got.device == pos.device
    torch.testing.assert_close(got.cpu().double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("budget", [2**20, 40, 7], ids=["all-rows", "blocks", "row-by-row"])
def test_fire_bias_under_bf16_autocast_does_not_depend_on_the_blocks(budget, monkeypatch):
    """Blocking rows is a memory bound only: under autocast (precision=bf16, CPU too) the bias has the dtype and the
    values of the all-rows computation at every budget."""
    f = _fire(L=8, mlp_width=4)
    pos = torch.arange(13)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = f.score_bias(pos, pos)
        monkeypatch.setattr(fire_mod, "HIDDEN_BUDGET", budget)
        got = f.score_bias(pos, pos)
    assert want.dtype == torch.bfloat16 and got.dtype == want.dtype
    assert torch.equal(got, want)

