"""Reference values for the schemes beyond the ALiBi paper's six, computed by hand from the papers' formulas
(../shared/REFERENCE.md §A), never from another implementation."""

import math

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.alibi import alibi_slopes
from pe_bench.schemes.cope import CoPE, CoPEOptions
from pe_bench.schemes.fire import Fire, FireOptions
from pe_bench.schemes.hybrid import Hybrid, HybridOptions
from pe_bench.schemes.kerple import KerpleLog, KerpleOptions, KerplePower
from pe_bench.schemes.sandwich import Sandwich, SandwichOptions
from pe_bench.schemes.shaw import Shaw, ShawOptions, shaw_index
from pe_bench.schemes.sinusoidal import sinusoid_table
from pe_bench.schemes.xl import TransformerXL, XLOptions
from pe_bench.schemes.xpos import XPos, XPosOptions, xpos_zeta


def shape(d_model=16, n_heads=2, n_layers=2, L=64):
    return ModelShape(d_model=d_model, n_heads=n_heads, head_dim=d_model // n_heads, train_seq_len=L,
                      n_layers=n_layers)


@pytest.mark.parametrize("i,j,row", [(25, 0, 20), (25, 4, 20), (25, 5, 20), (25, 6, 19), (25, 25, 0), (3, 9, 0)])
def test_shaw_clips_distances_at_k(i, j, row):
    assert shaw_index(torch.tensor([i]), torch.tensor([j]), 20).item() == row


def test_shaw_terms_are_q_dot_clipped_vector_and_values_add_weighted_vectors():
    s = Shaw(ShawOptions(max_distance=3), shape())
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 8, 8, generator=g)
    terms = s.score_terms(q, q, torch.arange(8), torch.arange(8), layer=1)
    for i, j in [(7, 0), (7, 4), (7, 5), (2, 2)]:
        w = s.key_table[1, min(i - j, 3)]
        assert terms[0, 1, i, j].item() == pytest.approx((q[0, 1, i] @ w).item() / math.sqrt(8), abs=1e-6)
    probs = torch.softmax(torch.randn(1, 2, 8, 8, generator=g), -1)
    out = s.value_terms(probs, torch.arange(8), torch.arange(8), layer=0)
    expected = sum(probs[0, 0, 7, j] * s.value_table[0, min(7 - j, 3)] for j in range(8))
    torch.testing.assert_close(out[0, 0, 7], expected)
    assert Shaw(ShawOptions(values=False), shape()).value_terms(probs, torch.arange(8), torch.arange(8), 0) is None


def test_xl_terms_are_the_four_term_decomposition_minus_q_dot_k():
    xl = TransformerXL(XLOptions(), shape(d_model=8, n_heads=2))
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 6, 4, generator=g), torch.randn(1, 2, 6, 4, generator=g)
    terms = xl.score_terms(q, k, torch.arange(6), torch.arange(6), layer=1)
    R = sinusoid_table(torch.arange(6), 8)
    for h, i, j in [(0, 5, 2), (1, 3, 3), (1, 5, 0)]:
        r = (R[i - j] @ xl.r_proj[1]).view(2, 4)[h]  # W_R R_{i−j} for head h
        expected = (xl.u[h] @ k[0, h, j] + q[0, h, i] @ r + xl.v[h] @ r) / 2  # (b) + (c) + (d) terms, / √4
        assert terms[0, h, i, j].item() == pytest.approx(expected.item(), abs=1e-6)


def test_xpos_zeta_matches_the_reference_code():
    # (arange(0, d, 2) + 0.4·d) / (1.4·d) for d = 8
    assert xpos_zeta(8).tolist() == pytest.approx([3.2 / 11.2, 5.2 / 11.2, 7.2 / 11.2, 9.2 / 11.2])


@pytest.mark.parametrize("m,n", [(512, 0), (700, 188), (4096, 3584), (5000, 4000), (3, 3)])
def test_xpos_decay_factor_at_a_distance(m, n):
    """q·k between unit vectors on rotary pair k: cos((m−n)θ_k)·ζ_k^((m−n)/512), wherever the positions sit."""
    d = 8
    xp = XPos(XPosOptions(), ModelShape(d_model=8, n_heads=1, head_dim=d, train_seq_len=64))
    for pair in range(d // 2):
        e = torch.zeros(1, 1, 1, d)
        e[..., pair] = 1.0  # half layout: pair k is dims (k, k + d/2)
        pos = torch.tensor([n, m])
        both = e.expand(1, 1, 2, d)
        q, k = xp.rotate(both, both, pos)
        got = (q[0, 0, 1] @ k[0, 0, 0]).item()  # query at m, key at n
        theta = 10000 ** (-2 * pair / d)
        zeta = (2 * pair / d + 0.4) / 1.4
        assert got == pytest.approx(math.cos((m - n) * theta) * zeta ** ((m - n) / 512), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("m,n", [(100, 0), (37, 30), (5, 5), (2000, 1990)])
def test_xpos_decay_uses_the_configured_gamma_and_scale_base(m, n):
    """γ_ζ = 0.2 and scale base 64: q·k on pair k is cos((m−n)θ_k)·ζ_k^((m−n)/64), ζ_k = (2k/d + 0.2)/1.2."""
    d = 8
    xp = XPos(XPosOptions(gamma=0.2, scale_base=64.0), ModelShape(d_model=8, n_heads=1, head_dim=d,
                                                                     train_seq_len=64))
    for pair in range(d // 2):
        e = torch.zeros(1, 1, 2, d)
        e[..., pair] = 1.0
        q, k = xp.rotate(e, e, torch.tensor([n, m]))
        got = (q[0, 0, 1] @ k[0, 0, 0]).item()
        zeta = (2 * pair / d + 0.2) / 1.2
        expected = math.cos((m - n) * 10000 ** (-2 * pair / d)) * zeta ** ((m - n) / 64)
        assert got == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_xpos_refuses_an_odd_head_dimension_by_name():
    with pytest.raises(ValueError, match="xpos rotates pairs of dimensions"):
        XPos(XPosOptions(), ModelShape(d_model=9, n_heads=1, head_dim=9, train_seq_len=64))


def test_xpos_is_stable_at_long_lengths():
    xp = XPos(XPosOptions(), ModelShape(d_model=64, n_heads=1, head_dim=64, train_seq_len=512))
    x = torch.randn(1, 1, 4096, 64)
    q, k = xp.rotate(x, x, torch.arange(4096))
    assert torch.isfinite(q).all() and torch.isfinite(k).all()


def test_sandwich_bias_at_a_few_distances():
    """d' = 4, H = 2: b_h(Δ) = (cos(Δ/100) + cos(Δ/10000) − 2) / (8h/2)."""
    sw = Sandwich(SandwichOptions(dim=4), shape(d_model=16, n_heads=2))
    pos = torch.tensor([0, 1, 100, 1000])
    bias = sw.score_bias(pos, pos)
    for qi, kj in [(1, 0), (2, 0), (3, 0), (3, 2), (2, 2)]:
        delta = (pos[qi] - pos[kj]).item()
        total = math.cos(delta / 100) + math.cos(delta / 10000) - 2
        assert bias[0, qi, kj].item() == pytest.approx(total / 4, abs=1e-6)
        assert bias[1, qi, kj].item() == pytest.approx(total / 8, abs=1e-6)
    assert bias[0, 2, 0].item() == pytest.approx((math.cos(1.0) + math.cos(0.01) - 2) / 4, abs=1e-7)


def test_kerple_kernels():
    pos = torch.arange(10)
    log = KerpleLog(KerpleOptions(), shape())
    power = KerplePower(KerpleOptions(), shape())
    with torch.no_grad():
        log.r1.fill_(1.5), log.r2.fill_(0.5), power.r1.fill_(0.25), power.r2.fill_(3.0)  # power's r2 clamps to 2
    assert log.score_bias(pos, pos, 1)[0, 9, 1].item() == pytest.approx(-1.5 * math.log(1 + 0.5 * 8), rel=1e-6)
    assert power.score_bias(pos, pos, 0)[1, 9, 1].item() == pytest.approx(-0.25 * 8**2, rel=1e-6)
    assert power.score_bias(pos, pos, 0)[1, 4, 4].item() == 0.0
    with torch.no_grad():
        power.r2.fill_(1.0)
        power.r1[1, 0] = alibi_slopes(2)[0]  # layer 1, head 0
    alibi = -alibi_slopes(2)[0] * (pos[:, None] - pos[None, :]).clamp(min=0)
    torch.testing.assert_close(power.score_bias(pos, pos, 1)[0], alibi.float())  # ALiBi is KERPLE-power, r2 = 1


@pytest.mark.parametrize("r2, exponent", [(-1.0, 1e-2), (0.0, 1e-2), (0.5, 0.5), (2.5, 2.0)])
def test_kerple_power_exponent_is_clamped_into_eps_2(r2, exponent):
    """0 < r2 <= 2: the exponent the kernel uses is r2 clamped into [1e-2, 2] (so r2 <= 0 is a near-flat bias, not
    a growing one)."""
    power = KerplePower(KerpleOptions(), shape())
    with torch.no_grad():
        power.r1.fill_(0.5), power.r2.fill_(r2)
    pos = torch.arange(10)
    bias = power.score_bias(pos, pos, 1)
    for i, j in [(9, 0), (9, 7), (3, 2)]:
        assert bias[0, i, j].item() == pytest.approx(-0.5 * (i - j) ** exponent, rel=1e-5)


def test_fire_normalises_log_distance_by_log_query_position():
    fire = Fire(FireOptions(mlp_width=1), ModelShape(d_model=8, n_heads=1, head_dim=8, train_seq_len=64, n_layers=1))
    lin1, lin2 = fire.layers[0].mlp[0], fire.layers[0].mlp[2]
    with torch.no_grad():  # make f_θ the identity on [0, 1] to read the normalised distance directly
        lin1.weight.fill_(1.0), lin1.bias.zero_(), lin2.weight.fill_(1.0), lin2.bias.zero_()
    pos = torch.arange(201)
    b = fire.score_bias(pos, pos, 0)[0]
    assert b[100, 50].item() == pytest.approx(math.log(0.1 * 50 + 1) / math.log(0.1 * 100 + 1), rel=1e-5)
    assert b[40, 10].item() == pytest.approx(math.log(0.1 * 30 + 1) / math.log(0.1 * 64 + 1), rel=1e-5)  # i < L
    assert b[200, 0].item() == pytest.approx(1.0, rel=1e-5)  # the farthest key maps to 1 at every length


def test_cope_positions_count_gates_and_interpolate():
    """With q·k = 0 every gate is σ(0) = 1/2, so p_ij = (i − j + 1)/2 (clipped at p_max − 1); with q·e[p] = a·p the
    interpolated term is a·p_ij exactly."""
    cope = CoPE(CoPEOptions(max_position=4), ModelShape(d_model=2, n_heads=1, head_dim=2, train_seq_len=8,
                                                         n_layers=1))
    with torch.no_grad():
        cope.pos_emb[0, 0] = torch.arange(4.0)
    q = torch.tensor([3.0, 0.0]).expand(1, 1, 8, 2)
    k = torch.tensor([0.0, 5.0]).expand(1, 1, 8, 2)
    terms = cope.score_terms(q, k, torch.arange(8), torch.arange(8), 0)[0, 0]
    for i, j in [(0, 0), (1, 0), (2, 0), (4, 2), (7, 0), (7, 6)]:
        assert terms[i, j].item() == pytest.approx(3.0 * min((i - j + 1) / 2, 3), abs=1e-6)


def test_hybrid_is_the_sum_of_its_parts():
    h = Hybrid(HybridOptions(), shape())
    x, pos = torch.zeros(1, 5, 16), torch.arange(5)
    sinusoidal, alibi = h.parts
    torch.testing.assert_close(h.embed(x, pos), sinusoidal.embed(x, pos))
    torch.testing.assert_close(h.score_bias(pos, pos), alibi.score_bias(pos, pos))
    assert h.label() == "hybrid"
    other = Hybrid(HybridOptions(parts=[{"name": "sinusoidal", "scale": 1.0}, {"name": "t5"}, {"name": "alibi"}]),
                   shape())
    assert other.label() == "sinusoidal[scale=1.0]+t5+alibi"
    t5, alibi = other.parts[1], other.parts[2]
    torch.testing.assert_close(other.score_bias(pos, pos), t5.score_bias(pos, pos) + alibi.score_bias(pos, pos))
    with pytest.raises(ValueError, match="not a scheme to compose"):
        HybridOptions(parts=[{"name": "hybrid"}])


def _shaw_by_hand(s, q, probs, q_pos, k_pos, layer):
    """Shaw et al. eq. 3–4, pair by pair: e_ij gains q_i·a^K_ij / √d and z_i gains Σ_j α_ij a^V_ij, with
    a_ij = w_clip(j − i, −K, K) (causal: j ≤ i, so the row is min(i − j, K)). float64, (B, H, Tq, Tk) and (B, H, Tq, D)."""
    B, H, Tq, D = q.shape
    K = s.options.max_distance
    wk, wv = s.key_table[layer].detach().double(), s.value_table[layer].detach().double()
    terms = torch.zeros(B, H, Tq, len(k_pos), dtype=torch.float64)
    values = torch.zeros(B, H, Tq, D, dtype=torch.float64)
    for i, qi in enumerate(q_pos.tolist()):
        for j, kj in enumerate(k_pos.tolist()):
            if kj > qi:
                continue
            row = min(qi - kj, K)
            terms[:, :, i, j] = q[:, :, i].double() @ wk[row] / math.sqrt(D)
            values[:, :, i] += probs[:, :, i, j, None].double() * wv[row]
    return terms, values


@pytest.mark.parametrize("q_pos, k_pos", [
    (torch.arange(12), torch.arange(12)),  # every query from 0: no key is beyond K of all of them
    (torch.tensor([9, 10, 11]), torch.arange(12)),  # a block of query rows: keys 0..6 are >= K from every query
    (torch.tensor([9, 10, 11]), torch.tensor([11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])),  # the same keys, reordered
    (torch.tensor([30, 31]), torch.arange(32)),  # all but the last K + 1 keys far
], ids=["full", "block", "block-reordered", "long-prefix"])
def test_shaw_terms_and_values_by_hand_for_every_pair(q_pos, k_pos):
    """Every (query, key) pair, including keys farther than K from every query of the block (they all share the
    last row w_K), in whatever order the keys come: the terms and the value vectors match eq. 3–4 entry by entry."""
    s = Shaw(ShawOptions(max_distance=3), shape())
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # rows of unit scale, so every wrong row shows
        s.key_table.copy_(torch.randn(s.key_table.shape, generator=g))
        s.value_table.copy_(torch.randn(s.value_table.shape, generator=g))
    q = torch.randn(2, 2, len(q_pos), 8, generator=g)
    future = k_pos[None, :] > q_pos[:, None]
    probs = torch.softmax(torch.randn(2, 2, len(q_pos), len(k_pos), generator=g).masked_fill(future, -math.inf), -1)
    expected_terms, expected_values = _shaw_by_hand(s, q, probs, q_pos, k_pos, layer=1)
    with torch.no_grad():
        terms = s.score_terms(q, q, q_pos, k_pos, layer=1)
        values = s.value_terms(probs, q_pos, k_pos, layer=1)
    assert terms.shape == (2, 2, len(q_pos), len(k_pos))
    past = ~future.expand_as(terms)
    torch.testing.assert_close(terms.double()[past], expected_terms[past], atol=1e-5, rtol=0)
    torch.testing.assert_close(values.double(), expected_values, atol=1e-5, rtol=0)


def test_shaw_tables_start_at_init_std():
    """a^K and a^V: per layer, k + 1 rows of head_dim, drawn N(0, init_std²)."""
    torch.manual_seed(0)
    s = Shaw(ShawOptions(max_distance=63, init_std=0.05), ModelShape(d_model=64, n_heads=2, head_dim=32,
                                                                     train_seq_len=64, n_layers=2))
    for table in (s.key_table, s.value_table):
        assert table.shape == (2, 64, 32)
        assert table.std().item() == pytest.approx(0.05, rel=0.05) and abs(table.mean().item()) < 0.005


def _cope_by_hand(cope, q, k, q_pos, k_pos, layer):
    """Golovneva et al. 2024 §3, pair by pair: g_ij = σ(q_i·k_j/√d) for j ≤ i (0 for the future),
    p_ij = Σ_{t=j..i} g_it clipped at p_max − 1, term = (1 − w)·q_i·e[⌊p⌋] + w·q_i·e[⌈p⌉], w = p − ⌊p⌋. float64.
    Also returns the largest unclipped p (to check the clip is reached)."""
    B, H, Tq, D = q.shape
    e = cope.pos_emb[layer].detach().double()  # (D, p_max)
    top = cope.options.max_position - 1
    terms = torch.zeros(B, H, Tq, len(k_pos), dtype=torch.float64)
    largest = 0.0
    for b in range(B):
        for h in range(H):
            for i, qi in enumerate(q_pos.tolist()):
                qv = q[b, h, i].double()
                gates = [torch.sigmoid(qv @ k[b, h, j].double() / math.sqrt(D)).item() if kj <= qi else 0.0
                         for j, kj in enumerate(k_pos.tolist())]
                for j, kj in enumerate(k_pos.tolist()):
                    if kj > qi:
                        continue
                    p = sum(gates[j:])
                    largest = max(largest, p)
                    p = min(p, top)
                    lo, hi = math.floor(p), math.ceil(p)
                    w = p - lo
                    terms[b, h, i, j] = (1 - w) * (qv @ e[:, lo]) + w * (qv @ e[:, hi])
    return terms, largest


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("rows", [slice(None), slice(5, 8)], ids=["all-rows", "block-of-rows"])
def test_cope_terms_by_hand_for_every_pair(grad, rows):
    """Random q, k and table, p_max = 4 (so the counts of the farther keys pass p_max − 1 and are clipped): every
    causal entry of the terms is the paper's interpolated q_i·e[p_ij], with the gates computed on the scale
    q·k/√d — with autograd (training) and without (evaluation's in-place path), for all rows or a block of them."""
    cope = CoPE(CoPEOptions(max_position=4), ModelShape(d_model=12, n_heads=3, head_dim=4, train_seq_len=8,
                                                         n_layers=2))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        cope.pos_emb.copy_(torch.randn(cope.pos_emb.shape, generator=g))
    q, k = torch.randn(2, 3, 8, 4, generator=g) * 2, torch.randn(2, 3, 8, 4, generator=g) * 2
    pos = torch.arange(8) + 3
    q, q_pos = q[:, :, rows], pos[rows]
    expected, largest = _cope_by_hand(cope, q, k, q_pos, pos, layer=1)
    assert largest > 3.5  # the clip at p_max − 1 = 3 is reached
    with torch.set_grad_enabled(grad):
        terms = cope.score_terms(q, k, q_pos, pos, 1)
    past = (pos[None, :] <= q_pos[:, None]).expand_as(terms)
    torch.testing.assert_close(terms.detach().double()[past], expected[past], atol=1e-5, rtol=0)
