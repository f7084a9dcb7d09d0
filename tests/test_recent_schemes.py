"""The schemes of 2024–2026 (issue 14), by hand from the papers' definitions: per-layer patterns (RNoPE/SmolLM3),
p-RoPE's truncated frequencies, HoPE's position-free low frequencies. The conformance suite (tests/test_schemes.py)
runs on them automatically."""

from __future__ import annotations

import math

import pytest
import torch

from pe_bench.config import compose
from pe_bench.model.decoder import Decoder, ModelArgs
from pe_bench.runs import run_name
from pe_bench.schemes import ModelShape
from pe_bench.schemes.alibi import ALiBi, ALiBiOptions
from pe_bench.schemes.base import whole
from pe_bench.schemes.layered import Layered, LayeredOptions
from pe_bench.schemes.rope import RoPE, RoPEOptions


def shape(n_layers: int = 8, L: int = 64) -> ModelShape:
    return ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=L, n_layers=n_layers)


def rotated_pairs(rope: RoPE, m: int = 5) -> list[bool]:
    """Which of the head's 4 pairs (layout half: dims k and k + 4) a rotation at position m changes."""
    q = torch.randn(1, 1, 1, 8, generator=torch.Generator().manual_seed(0))
    qr, _ = rope.rotate(q, q, torch.tensor([m]))
    changed = (qr - q).abs()[0, 0, 0] > 1e-6
    return [bool(changed[k] or changed[k + 4]) for k in range(4)]


def test_hope_rotates_only_the_frequencies_that_complete_a_period_within_L():
    """d = 8, b = 10⁴: θ = 1, 0.1, 0.01, 0.001; with L = 64, θ·L = 64, 6.4, 0.64, 0.064 against 2π = 6.28:
    the first two pairs rotate, the last two are position-free."""
    rope = RoPE(RoPEOptions(hope=True), shape(L=64))
    assert rope.rotating.tolist() == [True, True, False, False]
    assert rotated_pairs(rope) == [True, True, False, False]
    assert RoPE(RoPEOptions(hope=True), shape(L=63)).rotating.tolist() == [True, True, False, False]  # 6.3 > 2π
    assert RoPE(RoPEOptions(hope=True), shape(L=62)).rotating.tolist() == [True, False, False, False]  # 6.2 < 2π


@pytest.mark.parametrize("p, pairs", [(1.0, [True] * 4), (0.75, [True, True, True, False]),
                                      (0.5, [True, True, False, False]), (0.3, [True, False, False, False]),
                                      (0.0, [False] * 4)])
def test_p_rope_keeps_the_highest_fraction_p_of_frequencies(p, pairs):
    rope = RoPE(RoPEOptions(frequencies_kept=p), shape())
    assert rope.rotating.tolist() == pairs and rotated_pairs(rope) == pairs
    theta = rope.theta.tolist()
    for k in range(4):
        assert theta[k] == (pytest.approx(10000 ** (-2 * k / 8)) if pairs[k] else 0.0)


def test_position_free_pairs_stay_free_under_eval_time_scaling():
    rope = RoPE(RoPEOptions(frequencies_kept=0.5, scaling={"type": "yarn", "factor": 8}), shape())
    assert rope.theta[2:].tolist() == [0.0, 0.0] and (rope.theta[:2] > 0).all()
    assert RoPE(RoPEOptions(frequencies_kept=0.0), shape()).label() == "rope[frequencies_kept=0.0]"


def test_run_names_of_plain_rope_are_unchanged_by_the_new_options():
    """frequencies_kept and hope at their defaults stay out of the identity: the committed results' rope run keeps
    its name; setting one gives a new name."""
    assert run_name(compose(["scheme=rope"])) == "rope-tiny-shakespeare-L64-s0-7397d1b0"
    assert run_name(compose(["scheme=rope", "scheme.hope=true"])) != run_name(compose(["scheme=rope"]))


def test_layered_default_is_rope_with_nope_on_every_fourth_layer():
    s = Layered(LayeredOptions(), shape(n_layers=8))
    assert [s.part(layer).name for layer in range(8)] == ["rope", "rope", "rope", "nope"] * 2
    q = torch.randn(1, 2, 6, 8)
    pos = torch.arange(6) + 3
    for layer in range(8):
        qr, kr = s.rotate(q, q, pos, layer)
        if layer % 4 == 3:
            assert torch.equal(qr, q) and torch.equal(kr, q)
        else:
            torch.testing.assert_close(qr, RoPE(RoPEOptions(), shape()).rotate(q, q, pos)[0])
    assert s.label() == "layered" and s.relative


def test_layered_biases_come_from_each_layers_scheme():
    s = Layered(LayeredOptions(parts=[{"name": "rope"}, {"name": "alibi"}], pattern=[0, 1]), shape(n_layers=4))
    pos = torch.arange(5)
    assert s.score_bias(pos, pos, 0) is None and s.score_bias(pos, pos, 2) is None
    expected = ALiBi(ALiBiOptions(), shape()).score_bias(pos, pos)
    torch.testing.assert_close(s.score_bias(pos, pos, 3), expected)
    assert s.label() == "rope/alibi" and s.bias_per_layer


@pytest.mark.parametrize("parts, pattern, plain", [([{"name": "rope"}], [0], "rope"),
                                                   ([{"name": "rope"}, {"name": "nope"}], [1], "nope")])
def test_a_pattern_of_one_scheme_is_that_scheme(parts, pattern, plain):
    """Same weights, same logits: a per-layer pattern that always picks one scheme is exactly that scheme."""
    from pe_bench.schemes import get

    args = ModelArgs(vocab_size=40, n_layers=3, d_model=16, n_heads=2)
    torch.manual_seed(0)
    layered = Decoder(args, Layered(LayeredOptions(parts=parts, pattern=pattern), shape(n_layers=3)))
    cls = get(plain)
    torch.manual_seed(0)
    single = Decoder(args, cls(cls.Options(), shape(n_layers=3)))
    single.load_state_dict(layered.state_dict(), strict=False)
    x = torch.randint(0, 40, (2, 20))
    torch.testing.assert_close(layered(x), single(x), rtol=0, atol=0)


def test_layered_refuses_parts_that_act_on_the_input():
    with pytest.raises(ValueError, match=r"scheme.parts\[1\] \(learned\) acts on the input embedding"):
        Layered(LayeredOptions(parts=[{"name": "rope"}, {"name": "learned"}], pattern=[0, 1]), shape())
    with pytest.raises(ValueError, match="scheme.pattern has 3"):
        LayeredOptions(parts=[{"name": "rope"}], pattern=[0, 3])


def test_each_layer_runs_its_parts_hooks_with_its_own_layer_index():
    """Layer l runs parts[pattern[l mod 4]], called with l itself (not the part's index), so per-layer parts use
    that layer's parameters: SSMax's s (rotate), KERPLE's r1, r2 (score_bias), FoX's gates (input_bias), CoPE's
    table (score_terms) — each made different per layer here."""
    parts = [{"name": "ssmax"}, {"name": "kerple_power"}, {"name": "fox"}, {"name": "cope"}]
    s = Layered(LayeredOptions(parts=parts, pattern=[0, 1, 2, 3]), shape(n_layers=8))
    ssmax, kerple, fox, cope = s.parts
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        ssmax.s.copy_(torch.rand(ssmax.s.shape, generator=g) + 0.5)
        cope.pos_emb.copy_(torch.randn(cope.pos_emb.shape, generator=g))
    q, k = torch.randn(1, 2, 6, 8, generator=g), torch.randn(1, 2, 6, 8, generator=g)
    x = torch.randn(1, 6, 16, generator=g)
    pos = torch.arange(6) + 2
    with torch.no_grad():
        for layer in (4, 5, 6, 7):
            qs, ks = s.rotate(q, k, pos, layer)
            bias, data_bias = s.score_bias(pos, pos, layer), whole(s.input_bias(x, layer))
            terms = s.score_terms(q[:, :, 3:], k, pos[3:], pos, layer)
            part = [ssmax, kerple, fox, cope][layer % 4]
            assert s.part(layer) is part
            expected_q, expected_k = part.rotate(q, k, pos, layer)
            assert torch.equal(qs, expected_q) and torch.equal(ks, expected_k)
            for got, want in [(bias, part.score_bias(pos, pos, layer)), (data_bias, whole(part.input_bias(x, layer))),
                              (terms, part.score_terms(q[:, :, 3:], k, pos[3:], pos, layer))]:
                assert (got is None) == (want is None) and (got is None or torch.equal(got, want))
        # the layer's own parameters, not those of layer 0 or of the part's index
        assert not torch.equal(s.rotate(q, k, pos, 4)[0], ssmax.rotate(q, k, pos, 0)[0])
        assert not torch.equal(s.score_bias(pos, pos, 5), kerple.score_bias(pos, pos, 1))
        assert not torch.equal(whole(s.input_bias(x, 6)), whole(fox.input_bias(x, 2)))
        assert not torch.equal(s.score_terms(q[:, :, 3:], k, pos[3:], pos, 7),
                               cope.score_terms(q[:, :, 3:], k, pos[3:], pos, 3))


def test_layered_label_lists_the_layers_schemes_unless_both_parts_and_pattern_are_the_defaults():
    assert Layered(LayeredOptions(), shape()).label() == "layered"
    assert Layered(LayeredOptions(pattern=[0, 0, 1]), shape()).label() == "rope/rope/nope"
    assert (Layered(LayeredOptions(parts=[{"name": "rope", "base": 500.0}, {"name": "nope"}]), shape()).label()
            == "rope[base=500.0]/rope[base=500.0]/rope[base=500.0]/nope")


def test_layered_sees_input_parts_inside_a_composite_and_refuses_itself_as_a_part():
    """A hybrid part is refused when one of its own parts embeds the input (sinusoidal), accepted when none does;
    a layered scheme cannot be one of its own parts."""
    with pytest.raises(ValueError, match=r"scheme.parts\[1\] \(hybrid\) acts on the input embedding"):
        Layered(LayeredOptions(parts=[{"name": "rope"}, {"name": "hybrid"}], pattern=[0, 1]), shape())
    ok = Layered(LayeredOptions(parts=[{"name": "rope"}, {"name": "hybrid", "parts": [{"name": "rope"},
                                                                                        {"name": "alibi"}]}],
                                pattern=[0, 1]), shape())
    assert [p.name for p in ok.parts] == ["rope", "hybrid"]
    with pytest.raises(ValueError, match="'layered' is not a scheme to compose") as err:
        LayeredOptions(parts=[{"name": "rope"}, {"name": "layered"}])
    assert "layered" not in str(err.value).split("choose from")[1]


def test_longrope_divides_each_frequency_by_its_factor_and_switches_past_L():
    """HF's "longrope": θ_k / λ_k with short_factor up to L and long_factor past it; attention factor
    √(1 + ln s / ln L)."""
    sc = {"type": "longrope", "factor": 8, "long_factor": [1.0, 2.0, 4.0, 8.0], "short_factor": [1.0, 1.0, 1.5, 2.0]}
    rope = RoPE(RoPEOptions(scaling=sc), shape(L=64))
    base = [10000 ** (-2 * k / 8) for k in range(4)]
    short, attention = rope.frequencies(64)
    long, _ = rope.frequencies(65)
    assert short.tolist() == pytest.approx([t / f for t, f in zip(base, sc["short_factor"])])
    assert long.tolist() == pytest.approx([t / f for t, f in zip(base, sc["long_factor"])])
    assert attention == pytest.approx(math.sqrt(1 + math.log(8) / math.log(64)))
    assert rope.label() == "rope+longrope×8[long_factor=[1.0, 2.0, 4.0, 8.0],short_factor=[1.0, 1.0, 1.5, 2.0]]"
    with pytest.raises(ValueError, match="long_factor has 2 factors; this head rotates 8 dimensions: give 4"):
        RoPE(RoPEOptions(scaling={**sc, "long_factor": [1.0, 2.0]}), shape())


def test_rerope_clips_relative_positions_at_the_window():
    """ReRoPE with w = 3: the logit of (i, j) is q·R(min(i − j, w))·k — by hand, rotating unrotated q and k by the
    clipped distance — and plain RoPE's within the window."""
    rope = RoPE(RoPEOptions(), shape(L=16))
    rerope = RoPE(RoPEOptions(scaling={"type": "rerope", "window": 3}), shape(L=16))
    assert rerope.has_score_terms() and not rope.has_score_terms() and rerope.label() == "rope+rerope[window=3]"
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 8, 8, generator=g), torch.randn(1, 2, 8, 8, generator=g)
    pos = torch.arange(8) + 5
    qr, kr = rerope.rotate(q, k, pos)
    logits = qr @ kr.transpose(-1, -2) / math.sqrt(8) + rerope.score_terms(qr, kr, pos, pos, 0)
    for i, j in [(7, 0), (7, 4), (7, 5), (3, 3), (4, 1), (4, 2)]:
        d = min(i - j, 3)
        qd, _ = rope.rotate(q[:, :, i:i + 1], q[:, :, i:i + 1], torch.tensor([d]))
        expected = (qd[0, :, 0] * k[0, :, j]).sum(-1) / math.sqrt(8)
        torch.testing.assert_close(logits[0, :, i, j], expected, atol=1e-5, rtol=0)
    assert RoPE(RoPEOptions(scaling={"type": "rerope"}), shape(L=16)).window == 16  # default: the training length


@pytest.mark.parametrize("kept", [1.0, 0.5], ids=["rope", "p-rope"])
def test_rerope_at_the_window_edge_by_hand(kept):
    """ReRoPE with w = 4 at the distances w − 1, w, w + 1 (and all others) of a block of 3 query rows against
    their 7 keys: the logit is q·R(min(i − j, w))·k / √d with R the scheme's own rotation — p-RoPE's, with its
    position-free pairs, when frequencies_kept = 0.5."""
    opts = dict(frequencies_kept=kept)
    plain = RoPE(RoPEOptions(**opts), shape(L=16))
    rerope = RoPE(RoPEOptions(**opts, scaling={"type": "rerope", "window": 4}), shape(L=16))
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 7, 8, generator=g), torch.randn(1, 2, 7, 8, generator=g)
    pos = torch.arange(7) + 9
    qr, kr = rerope.rotate(q, k, pos)
    rows = slice(4, 7)  # queries at 13, 14, 15; keys 9..15
    logits = (qr[:, :, rows] @ kr.transpose(-1, -2) / math.sqrt(8)
              + rerope.score_terms(qr[:, :, rows], kr, pos[rows], pos, 0))
    seen = set()
    for a, i in enumerate(range(4, 7)):
        for j in range(i + 1):
            d = min(i - j, 4)
            seen.add(i - j)
            qd, _ = plain.rotate(q[:, :, i:i + 1], q[:, :, i:i + 1], torch.tensor([d]))
            expected = (qd[0, :, 0] * k[0, :, j]).sum(-1) / math.sqrt(8)
            torch.testing.assert_close(logits[0, :, a, j], expected, atol=1e-5, rtol=0)
    assert {3, 4, 5} <= seen


def test_dape_adds_the_bias_and_an_mlp_of_every_heads_logit_and_bias():
    """DAPE eq. 5 by hand at a few (i, j): terms = B_h + [W2·LeakyReLU(W1·x + b1) + b2]_h with x the 2H numbers
    (q·k/√d of every head, then B of every head) at (i, j), the MLP of that layer."""
    from pe_bench.schemes.dape import DAPE, DAPEOptions

    torch.manual_seed(0)
    s = DAPE(DAPEOptions(mlp_width=5), shape(n_layers=2))
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 6, 8, generator=g), torch.randn(1, 2, 6, 8, generator=g)
    pos = torch.arange(6)
    terms = s.score_terms(q, k, pos, pos, 1)
    bias = ALiBi(ALiBiOptions(), shape()).score_bias(pos, pos)  # slopes 1/2^4, 1/2^8 for H = 2
    lin1, lin2 = s.mlps[1][0], s.mlps[1][2]
    for i, j in [(5, 0), (5, 5), (3, 1)]:
        logits = (q[0, :, i] * k[0, :, j]).sum(-1) / math.sqrt(8)
        x = torch.cat([logits, bias[:, i, j]])
        h = lin1.weight @ x + lin1.bias
        f = lin2.weight @ torch.where(h > 0, h, 0.01 * h) + lin2.bias
        torch.testing.assert_close(terms[0, :, i, j], bias[:, i, j] + f, atol=1e-6, rtol=0)
    assert bias[1, 5, 0].item() == pytest.approx(-5 / 2**8)


def test_ssmax_scales_each_query_by_s_ln_n_with_s_one_over_ln_L():
    """Fixed s (learned: false) = 1/ln L, L = 16: the query at position 15 (n = 16 keys) keeps its scale 1, at position
    3 (n = 4) it is ln 4 / ln 16 = 0.5, at position 255 (n = 256) ln 256 / ln 16 = 2; keys are untouched. Learned s
    starts at the same value, one per layer and head."""
    from pe_bench.schemes.ssmax import SSMax, SSMaxOptions

    sm = SSMax(SSMaxOptions(learned=False), shape(n_layers=2, L=16))
    q = torch.ones(1, 2, 3, 8)
    qs, ks = sm.rotate(q, q.clone(), torch.tensor([3, 15, 255]), layer=1)
    assert qs[0, :, :, 0].flatten().tolist() == pytest.approx([0.5, 1.0, 2.0] * 2, rel=1e-6)
    assert torch.equal(ks, q)
    learned = SSMax(SSMaxOptions(), shape(n_layers=3, L=16))
    assert learned.s.shape == (3, 2) and learned.s.requires_grad
    assert learned.s.detach().flatten().tolist() == pytest.approx([1 / math.log(16)] * 6)


@pytest.mark.parametrize("L", [1, 2, 3])
def test_ssmax_s_starts_at_one_over_ln_max_L_2(L):
    """s = 1/ln max(L, 2): the scale s·ln n is 1 at n = max(L, 2) keys (ln 1 = 0 would divide by zero)."""
    from pe_bench.schemes.ssmax import SSMax, SSMaxOptions

    for learned in (True, False):
        sm = SSMax(SSMaxOptions(learned=learned), shape(n_layers=1, L=L))
        q = torch.ones(1, 2, 1, 8)
        qs, _ = sm.rotate(q, q, torch.tensor([max(L, 2) - 1]), 0)
        assert qs.flatten().tolist() == pytest.approx([1.0] * 16, rel=1e-6)


def test_ssmax_fixed_s_is_not_a_parameter_nor_saved():
    """learned: false: s is a constant of the configuration — no parameter to train, nothing in the checkpoint;
    learned: true: s is the one parameter, saved."""
    from pe_bench.schemes.ssmax import SSMax, SSMaxOptions

    fixed = SSMax(SSMaxOptions(learned=False), shape(n_layers=2, L=16))
    assert list(fixed.parameters()) == [] and list(fixed.state_dict()) == []
    learned = SSMax(SSMaxOptions(learned=True), shape(n_layers=2, L=16))
    assert [n for n, _ in learned.named_parameters()] == ["s"] and list(learned.state_dict()) == ["s"]


def test_logn_at_evaluation_scales_queries_beyond_L_only():
    """The training-free form (eval.logn): max(1, ln n / ln L) — 1 for every n <= L, ln 256 / ln 16 = 2 at n = 256."""
    from pe_bench.model.decoder import logn_beyond

    scale = logn_beyond(torch.arange(256), 16)
    assert torch.equal(scale[:16], torch.ones(16))
    assert scale[255].item() == pytest.approx(2.0)
    assert scale[16].item() == pytest.approx(math.log(17) / math.log(16))


def test_fox_with_a_constant_gate_is_alibi_with_slope_minus_ln_f():
    """f_t = σ(w·x_t + b) with w = 0 and b = 5: every ln f_l = ln σ(5) = −0.0067153…, so D_ij = Σ_{l=j+1..i} ln f_l
    = (i − j)·ln σ(5) — ALiBi with slope −ln σ(5); the future is left to the causal mask."""
    from pe_bench.schemes.fox import Fox, FoxOptions

    fox = Fox(FoxOptions(), shape(n_layers=2))
    with torch.no_grad():
        fox.gates[1].weight.zero_()
    x = torch.randn(1, 5, 16)
    d = fox.input_bias(x, layer=1)[0, 0]
    ln_f = -math.log1p(math.exp(-5.0))  # ln σ(5)
    assert ln_f == pytest.approx(-0.0067153484891179, rel=1e-12)
    i, j = torch.meshgrid(torch.arange(5), torch.arange(5), indexing="ij")
    keep = j <= i
    assert d[keep].tolist() == pytest.approx(((i - j)[keep] * ln_f).tolist(), abs=1e-6)


def test_fox_outside_autograd_gives_its_bias_by_blocks_of_rows_with_the_same_numbers():
    """At evaluation FoX's bias is never built whole unless asked: a block of query rows [i, j) against keys [0, j)
    holds exactly the whole bias's entries (c_i − c_j), so attention by blocks computes the same logits."""
    from pe_bench.schemes.base import RowBias
    from pe_bench.schemes.fox import Fox, FoxOptions

    fox = Fox(FoxOptions(), shape(n_layers=1))
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(3))
    trained = fox.input_bias(x, 0)
    with torch.no_grad():
        lazy = fox.input_bias(x, 0)
    assert isinstance(trained, torch.Tensor) and isinstance(lazy, RowBias)
    assert torch.equal(lazy.full(), trained.detach())
    for i, j in [(0, 1), (3, 7), (8, 9)]:
        assert torch.equal(lazy.block(i, j), trained.detach()[:, :, i:j, :j])


def test_fox_gates_start_with_weights_n_0_0_02_and_bias_5():
    """The reference initialisation: w ~ N(0, 0.02²) (one (H, C) weight per layer), b = gate_bias_init."""
    from pe_bench.schemes.fox import Fox, FoxOptions

    torch.manual_seed(0)
    fox = Fox(FoxOptions(gate_bias_init=3.0), ModelShape(d_model=256, n_heads=8, head_dim=32, train_seq_len=64,
                                                         n_layers=4))
    w = torch.stack([g.weight.detach() for g in fox.gates])
    assert w.shape == (4, 8, 256)  # 8192 draws: the sample std is within 2% of 0.02, the mean within 0.001 of 0
    assert w.std().item() == pytest.approx(0.02, rel=0.02) and abs(w.mean().item()) < 0.001
    assert all(torch.equal(g.bias, torch.full((8,), 3.0)) for g in fox.gates)


def test_fox_gates_depend_on_the_tokens():
    """A data-dependent bias: two inputs give two biases (the gate reads x), each 0 on the diagonal."""
    from pe_bench.schemes.fox import Fox, FoxOptions

    fox = Fox(FoxOptions(), shape(n_layers=1))
    a, b = (fox.input_bias(torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(s)), 0) for s in (0, 1))
    assert not torch.allclose(a, b)
    assert a[0, :, range(6), range(6)].abs().max() == 0


def test_stick_breaking_weights_by_hand():
    """z = (0.5, −1, 2) for keys 0, 1, 2 of the query at position 3 (its own key excluded, the paper's j < i):
    A_2 = σ(2), A_1 = σ(−1)(1 − σ(2)), A_0 = σ(0.5)(1 − σ(−1))(1 − σ(2)): the nearest key claims first. The rest of
    the row, 1 − Σ_j A_ij, goes to the query's own value (its own key's weight), unless ``remainder: false``."""
    from pe_bench.schemes.stickbreaking import StickBreaking, StickBreakingOptions

    def s(v: float) -> float:
        return 1 / (1 + math.exp(-v))

    logits = torch.tensor([[[[0.5, -1.0, 2.0, 7.0]]]])  # the query's own key (7.0) is not scored
    paper = [s(0.5) * (1 - s(-1)) * (1 - s(2)), s(-1) * (1 - s(2)), s(2)]
    bare = StickBreaking(StickBreakingOptions(remainder=False), shape())
    w = bare.attention_weights(logits, torch.tensor([3]), torch.arange(4), 0)
    assert w.flatten().tolist() == pytest.approx([*paper, 0.0], rel=1e-5)
    w = StickBreaking(StickBreakingOptions(), shape()).attention_weights(logits, torch.tensor([3]), torch.arange(4), 0)
    assert w.flatten().tolist() == pytest.approx([*paper, 1 - sum(paper)], rel=1e-5)
    own = StickBreaking(StickBreakingOptions(attend_current=True, remainder=False), shape())
    w = own.attention_weights(logits, torch.tensor([3]), torch.arange(4), 0).flatten()
    assert w[3].item() == pytest.approx(s(7.0)) and w[2].item() == pytest.approx(s(2) * (1 - s(7.0)), rel=1e-5)


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("remainder", [True, False])
def test_stick_breaking_evaluates_the_weights_it_trains_with(attend_current, remainder):
    """Outside autograd the weights are computed in place with exp as exp2 (no slow path where far keys underflow):
    the autograd path's weights to 1e-5 (and 2e-6 absolute: the remainder, 1 − Σ_j A_ij, carries the rounding of a
    sum of weights <= 1), on logits wide enough that far keys underflow, for a block of query rows against its causal
    prefix; future keys get exactly 0."""
    from pe_bench.schemes.stickbreaking import StickBreaking, StickBreakingOptions

    sb = StickBreaking(StickBreakingOptions(attend_current=attend_current, remainder=remainder), shape())
    q_pos, k_pos = torch.arange(60, 70), torch.arange(70)
    future = k_pos[None, :] > q_pos[:, None]
    logits = (8 * torch.randn(2, 3, 10, 70, generator=torch.Generator().manual_seed(4))).masked_fill(future, -math.inf)
    trained = sb.attention_weights(logits.clone().requires_grad_(), q_pos, k_pos, 0).detach()
    with torch.no_grad():
        evaluated = sb.attention_weights(logits.clone(), q_pos, k_pos, 0)
    torch.testing.assert_close(evaluated, trained, rtol=1e-5, atol=2e-6)
    assert (evaluated[..., future] == 0).all()


def official_stick_breaking(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attend_current: bool) -> torch.Tensor:
    """The authors' reference (shawntan/stickbreaking-attention, sb_ref.stickbreaking and tests/test_attn.ref_fwd),
    restated: ln β masked to 0 and ln z to −1e5 outside the visible keys, the reversed cumulative sum as a product
    with a strictly lower-triangular matrix, then o + rem · v."""
    T = q.shape[-2]
    mask = torch.ones(T, T).triu(1 if attend_current else 0).bool()
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    log_z = torch.nn.functional.logsigmoid(logits).masked_fill(mask, -1e5)
    log_beta = torch.nn.functional.logsigmoid(-logits).masked_fill(mask, 0)
    att = (log_z + torch.einsum("bhij,jk->bhik", log_beta, torch.ones(T, T).tril(-1))).exp()
    return att @ v + (1 - att.sum(-1))[..., None] * v


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_attention_equals_the_authors_reference(attend_current):
    """The whole attention (pe-bench's explicit path with the scheme's weights) against the official definition on
    small random inputs, in training (all rows at once) and in evaluation (query rows by blocks)."""
    from pe_bench.model.attention import attend_explicit
    from pe_bench.schemes.stickbreaking import StickBreaking, StickBreakingOptions

    g = torch.Generator().manual_seed(0)
    q, k, v = (0.5 * torch.randn(2, 3, 12, 8, generator=g) for _ in range(3))
    sb = StickBreaking(StickBreakingOptions(attend_current=attend_current), shape())
    want = official_stick_breaking(q, k, v, attend_current)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            got = attend_explicit(q, k, v, None, torch.arange(12),
                                  weights=lambda logits, qp, kp: sb.attention_weights(logits, qp, kp, 0))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    first = attend_explicit(q, k, v, None, torch.arange(12),
                            weights=lambda logits, qp, kp: sb.attention_weights(logits, qp, kp, 0))[:, :, 0]
    if not attend_current:  # the first query sees no earlier key: all of its row is the remainder, its own value
        torch.testing.assert_close(first, v[:, :, 0])


def test_the_default_sweep_adds_p_rope_and_hope_points_beside_plain_rope():
    from pe_bench.sweep import expand, load_sweep

    points = expand(load_sweep("default", ["schemes=[rope,alibi]"]), ["seed=0"])
    schemes = [[o for o in p if o.startswith("scheme")] for p in points]
    assert schemes == [["scheme=rope"], ["scheme=rope", "scheme.frequencies_kept=0.75"],
                       ["scheme=rope", "scheme.hope=true"], ["scheme=alibi"]]
    # schemes named on the command line replace the config's, its variants too
    named = expand(load_sweep("default"), ["scheme=rope,alibi", "seed=0"])
    assert [[o for o in p if o.startswith("scheme")] for p in named] == [["scheme=rope"], ["scheme=alibi"]]


def test_eval_logn_adds_plus_logn_rows_equal_to_the_plain_ones_at_L(smoke_args, tmp_path):
    """`pe-bench eval RUN eval.logn=true` evaluates the same weights with the log-n temperature beyond L: rows
    labelled <scheme>+logn beside the plain ones, the same perplexity at L (no query sees more than L keys there)
    and a different one beyond it."""
    import pandas as pd
    from typer.testing import CliRunner

    from pe_bench.cli import app

    runner = CliRunner()
    assert runner.invoke(app, ["train", "scheme=nope", *smoke_args, "--no-progress"]).exit_code == 0
    run = next((tmp_path / "results" / "runs").iterdir())
    r = runner.invoke(app, ["eval", str(run), "eval.logn=true", "eval.modes=[nonoverlapping]"])
    assert r.exit_code == 0, r.output
    ev = pd.read_csv(run / "eval.csv")
    ev = ev[ev["mode"] == "nonoverlapping"].set_index(["scheme", "L_eval"])["ppl"]
    L = 32
    assert ev[("nope+logn", L)] == pytest.approx(ev[("nope", L)], rel=1e-6)
    assert ev[("nope+logn", 4 * L)] != pytest.approx(ev[("nope", 4 * L)], rel=1e-6)


@pytest.mark.parametrize("scheme", ["nope", "rope", "alibi"])
def test_qk_norm_hands_the_scheme_unit_rms_queries_and_keys_per_head(scheme):
    """model.qk_norm: q and k are RMS-normalised over each head's dimensions (gain 1 at initialisation) before the
    scheme acts on them, with any scheme; a run with it is another run, one without it keeps its name."""
    cfg = compose([f"scheme={scheme}", "model.qk_norm=true"])
    from pe_bench.build import build_model

    model = build_model(cfg, vocab_size=50)
    seen = []
    rotate = model.scheme.rotate

    def spy(q, k, positions, layer=0):
        seen.append((q, k))
        return rotate(q, k, positions, layer)

    model.scheme.rotate = spy
    with torch.no_grad():
        model(torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(0)))
    assert len(seen) == cfg.model.n_layers
    for q, k in seen:
        for t in (q, k):
            torch.testing.assert_close(t.pow(2).mean(-1), torch.ones(t.shape[:-1]), rtol=1e-4, atol=1e-4)
    assert run_name(cfg) != run_name(compose([f"scheme={scheme}"]))
    assert run_name(compose([f"scheme={scheme}", "model.qk_norm=false"])) == run_name(compose([f"scheme={scheme}"]))


def test_layered_local_layers_see_a_sliding_window_and_global_layers_everything():
    """window w = 3 on the RoPE part of [rope, rope, rope, nope]: layers 0–2 add −∞ at i − j >= 3, layer 3 (NoPE) has
    no bias; with ``chunked`` the local layers see their own chunk of 3, ⌊i/3⌋ = ⌊j/3⌋."""
    pos = torch.arange(8)
    s = Layered(LayeredOptions(window=3), shape(n_layers=4))
    bias = s.score_bias(pos, pos, 0)
    assert bias.shape == (2, 8, 8)
    far = (pos[:, None] - pos[None, :]) >= 3
    assert torch.isinf(bias[:, far]).all() and (bias[:, ~far] == 0).all()
    assert s.score_bias(pos, pos, 3) is None
    assert s.label() == "layered[window=3]" and s.flex_problem() and s.bias_by_distance()
    chunked = Layered(LayeredOptions(window=3, chunked=True), shape(n_layers=4))
    other = (pos[:, None] // 3) != (pos[None, :] // 3)
    assert torch.isinf(chunked.score_bias(pos, pos, 1)[:, other]).all()
    assert (chunked.score_bias(pos, pos, 1)[:, ~other] == 0).all()
    assert not chunked.relative and not chunked.bias_by_distance()


def test_a_model_of_local_layers_reads_no_farther_than_its_receptive_field():
    """Two layers that all attend within w = 3 keys: the logit at position t depends on tokens t − 4 .. t only
    (2 · (w − 1) back); a token farther back changes nothing, one inside the field does."""
    cfg = compose(["scheme=layered", "scheme.window=3", "scheme.pattern=[0]", "model.n_layers=2"])
    from pe_bench.build import build_model

    model = build_model(cfg, vocab_size=50).eval()
    idx = torch.randint(0, 50, (1, 16), generator=torch.Generator().manual_seed(0))
    t = 12
    with torch.no_grad():
        base = model(idx)[0, t]
        far, near = idx.clone(), idx.clone()
        far[0, t - 5] = (far[0, t - 5] + 1) % 50
        near[0, t - 4] = (near[0, t - 4] + 1) % 50
        assert torch.equal(model(far)[0, t], base)
        assert not torch.allclose(model(near)[0, t], base)


def test_pope_scores_by_hand_from_the_papers_equation():
    """Eq. 6 of PoPE: a_ts = Σ_c softplus(q_tc)·softplus(k_sc)·cos((s − t)·θ_c + δ_c) / √d, θ_c = 10⁴^(−c/d), with
    the key phase bias δ clamped to [−2π, 0] (set here to −1 and to −9, which clamps to −2π)."""
    from pe_bench.schemes.pope import PoPE, PoPEOptions

    sh = ModelShape(d_model=8, n_heads=2, head_dim=4, train_seq_len=16, n_layers=2)
    pope = PoPE(PoPEOptions(), sh)
    with torch.no_grad():
        pope.delta[1] = torch.tensor([[-1.0, 0.0, -9.0, -0.5], [0.0, -2.0, 0.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 6, 4, generator=g), torch.randn(1, 2, 6, 4, generator=g)
    pos = torch.arange(6) + 3
    qp, kp = pope.rotate(q, k, pos, layer=1)
    got = (qp @ kp.transpose(-1, -2)) / math.sqrt(qp.shape[-1])  # what attention computes: 1/√(2d)

    def sp(x: float) -> float:
        return math.log1p(math.exp(x))

    delta = pope.delta[1].clamp(-2 * math.pi, 0).tolist()
    for h, t, s in [(0, 5, 2), (1, 4, 4), (0, 1, 0), (1, 5, 0)]:
        want = sum(sp(q[0, h, t, c].item()) * sp(k[0, h, s, c].item())
                   * math.cos((pos[s] - pos[t]).item() * 1e4 ** (-c / 4) + delta[h][c]) for c in range(4)) / 2
        assert got[0, h, t, s].item() == pytest.approx(want, rel=1e-4, abs=1e-5)
    bare = PoPE(PoPEOptions(phase_bias=False), sh)
    assert bare.delta is None and not list(bare.parameters())


def test_fope_keeps_the_frequencies_that_complete_a_period_within_L_by_hand():
    """d = 32, b = 10⁴, L = 64: ω_j = 10⁴^(−j/16) >= 2π/64 ≈ 0.098 holds for j = 0..4 (ω_4 = 0.1, ω_5 = 0.056): K = 5,
    K' = min(5, 32/4) = 5 series pairs, the other 11 pairs position-free."""
    from pe_bench.schemes.fope import FoPE, FoPEOptions, kept_frequencies

    assert kept_frequencies(32, 1e4, 64).tolist() == pytest.approx([1e4 ** (-j / 16) for j in range(5)], rel=1e-12)
    fope = FoPE(FoPEOptions(), ModelShape(d_model=64, n_heads=2, head_dim=32, train_seq_len=64, n_layers=3))
    assert fope.cos_coef.shape == fope.sin_coef.shape == (3, 2, 5, 5)
    assert {"cos_coef", "sin_coef"} <= set(fope.state_dict())  # fixed, and kept with the weights


def test_fope_with_identity_coefficients_is_rope_on_the_kept_pairs_and_constant_on_the_rest():
    """σ = 0: the coefficients are the identity, so the K kept pairs rotate as RoPE's (layout half) and the padded pairs
    take C = S = 1 at every position: (x1, x2) ↦ (x1 − x2, x2 + x1)."""
    from pe_bench.schemes.fope import FoPE, FoPEOptions

    sh = ModelShape(d_model=64, n_heads=2, head_dim=32, train_seq_len=64)
    fope, rope = FoPE(FoPEOptions(sigma=0.0), sh), RoPE(RoPEOptions(), sh)
    q = torch.randn(1, 2, 7, 32, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(7) * 9
    got, want = fope.rotate(q, q, pos)[0], rope.rotate(q, q, pos)[0]
    kept = [*range(5), *range(16, 21)]
    torch.testing.assert_close(got[..., kept], want[..., kept], rtol=1e-5, atol=1e-5)
    x1, x2 = q[..., 5:16], q[..., 21:32]
    torch.testing.assert_close(got[..., 5:16], x1 - x2)
    torch.testing.assert_close(got[..., 21:32], x2 + x1)


def test_fope_equals_the_official_reference_computation():
    """The authors' apply step (``fourier_rope_0_ref``): einsum of the sin/cos bases with per-head coefficients, the
    rest padded with 1, then t·[C, C] + rotate_half(t)·[S, S]; here against coefficients drawn with σ = 0.3."""
    from pe_bench.schemes.fope import FoPE, FoPEOptions

    torch.manual_seed(1)
    sh = ModelShape(d_model=64, n_heads=2, head_dim=32, train_seq_len=64, n_layers=2)
    fope = FoPE(FoPEOptions(), sh)
    t = torch.randn(2, 2, 9, 32)
    pos = torch.arange(9) + 40
    angles = pos[:, None].double() * fope.omega[None, :]
    pos_sin = angles.sin().float().expand(2, 2, 9, -1)
    pos_cos = angles.cos().float().expand(2, 2, 9, -1)
    s = torch.einsum("bhtD,hDd->bhtd", pos_sin, fope.sin_coef[1])
    c = torch.einsum("bhtD,hDd->bhtd", pos_cos, fope.cos_coef[1])
    s, c = (torch.nn.functional.pad(x, (0, 16 - x.shape[-1]), value=1) for x in (s, c))
    s, c = torch.cat([s, s], -1), torch.cat([c, c], -1)
    half = torch.cat([-t[..., 16:], t[..., :16]], -1)
    torch.testing.assert_close(fope.rotate(t, t, pos, layer=1)[0], t * c + half * s, rtol=1e-5, atol=1e-5)
    assert not torch.equal(fope.cos_coef[0], fope.cos_coef[1])  # drawn per layer


def official_fope_coefficients(layers: int, heads: int, K: int, K2: int, sigma: float) -> torch.Tensor:
    """The authors' FourierEmbedding.reset_parameters (olmo/model.py, ``eye_xavier_norm``, separate basis and head),
    once per layer: xavier_normal_ of an (H, K, K') tensor with gain σ, plus torch.eye(K) when K = K', else
    get_step_eye: zeros, step = ⌈K/K'⌉, a 1 at [..., i·step, i] for i in range(K') while i·step < K."""
    def one() -> torch.Tensor:
        coef = torch.nn.init.xavier_normal_(torch.empty(heads, K, K2), gain=sigma)
        if K == K2:
            return coef + torch.eye(K)
        eye = torch.zeros(heads, K, K2)
        step = math.ceil(K / K2)
        for i in range(K2):
            if i * step < K:
                eye[..., i * step, i] = 1.0
        return coef + eye

    return torch.stack([one() for _ in range(layers)])


@pytest.mark.parametrize("sigma", [0.0, 0.3])
@pytest.mark.parametrize("head_dim, L, K, K2", [(32, 64, 5, 5), (32, 512, 8, 8), (32, 1024, 9, 8),
                                                (32, 4096, 12, 8), (64, 2048, 21, 16), (16, 4096, 6, 4),
                                                (18, 32768, 9, 4)])
def test_fope_coefficients_equal_the_official_initialisation(head_dim, L, K, K2, sigma):
    """K <= d/4: identity plus the draw; K > d/4: the step identity (d = 32, L = 1024: K = 9, K' = 8, step 2, ones
    at (0, 0), (2, 1), (4, 2), (6, 3), (8, 4), columns 5–7 the draw alone; d = 18: step 3). The same draws as the
    official code from the same seed: cos for every layer, then sin."""
    from pe_bench.schemes.fope import FoPE, FoPEOptions

    sh = ModelShape(d_model=3 * head_dim, n_heads=3, head_dim=head_dim, train_seq_len=L, n_layers=2)
    torch.manual_seed(7)
    fope = FoPE(FoPEOptions(sigma=sigma), sh)
    torch.manual_seed(7)
    want_cos = official_fope_coefficients(2, 3, K, K2, sigma)
    want_sin = official_fope_coefficients(2, 3, K, K2, sigma)
    assert fope.cos_coef.shape == (2, 3, K, K2)
    torch.testing.assert_close(fope.cos_coef, want_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(fope.sin_coef, want_sin, rtol=0, atol=1e-6)


def official_path_logits(q, k, w, beta, BT: int = 4) -> torch.Tensor:
    """fla-org/flash-linear-attention's reference (tests/ops/test_path_attn.py, ``naive_path_attn``), restated
    without its gate: chunks of BT tokens, each chunk's UT transform T = (I + strictly_lower(diag(β) W Wᵀ))⁻¹, the
    chunk-local logits and transformed q, k, then q carried backwards through every earlier chunk's product I − Hc.
    q, k, w: (B, H, T, d), beta: (B, H, T) -> (B, H, T, T) logits, −inf above the diagonal."""
    B, H, T, d = q.shape
    n = -(-T // BT)
    pad = n * BT - T
    q, k, w = (torch.nn.functional.pad(x.double(), (0, 0, 0, pad)) for x in (q, k, w))
    beta = torch.nn.functional.pad(beta.double(), (0, pad))
    wb = w * beta[..., None]
    q, k, w, wb = (x.view(B, H, n, BT, d) for x in (q, k, w, wb))
    eye = torch.eye(BT, dtype=torch.float64)
    Tm = torch.linalg.inv(eye + (wb @ w.transpose(-1, -2)).tril(-1))
    Twbk = Tm @ (wb @ k.transpose(-1, -2)).tril(-1)
    qw = (q @ w.transpose(-1, -2)).tril()
    Twb = Tm @ wb
    local = (q @ k.transpose(-1, -2)).tril() - qw @ Twbk
    q = q - qw @ Twb
    k = k - Twbk.transpose(-1, -2) @ w
    Hc = w.transpose(-1, -2) @ Twb
    A = torch.zeros(B, H, n * BT, n * BT, dtype=torch.float64)
    for i in range(n):
        A[:, :, i * BT:(i + 1) * BT, i * BT:(i + 1) * BT] = local[:, :, i]
        qi = q[:, :, i]
        for j in range(i - 1, -1, -1):
            A[:, :, i * BT:(i + 1) * BT, j * BT:(j + 1) * BT] = qi @ k[:, :, j].transpose(-1, -2)
            qi = qi - qi @ Hc[:, :, j]
    A = A[:, :, :T, :T]
    return A.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))


def test_path_logits_equal_the_official_reference_and_the_householder_products_by_hand():
    """PaTH's explicit logits against fla's chunked reference (three chunks of 4, padded), and one pair by hand:
    s_{7,2} = q_7ᵀ H_7 H_6 H_5 H_4 H_3 k_2 with H_t = I − β_t w_t w_tᵀ; the diagonal is the plain q·k."""
    from pe_bench.schemes.path import path_logits

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 10, 8, generator=g), torch.randn(2, 3, 10, 8, generator=g)
    w = torch.nn.functional.normalize(torch.randn(2, 3, 10, 8, generator=g), dim=-1)
    beta = 1.5 + 0.5 * torch.rand(2, 3, 10, generator=g)
    got = path_logits(q, k, w, beta)
    want = official_path_logits(q, k, w, beta)
    lower = torch.ones(10, 10, dtype=torch.bool).tril()
    torch.testing.assert_close(got[..., lower].double(), want[..., lower], rtol=1e-4, atol=1e-4)
    P = torch.eye(8)
    for t in range(7, 2, -1):
        P = P @ (torch.eye(8) - beta[0, 1, t] * torch.outer(w[0, 1, t], w[0, 1, t]))
    assert got[0, 1, 7, 2].item() == pytest.approx((q[0, 1, 7] @ P @ k[0, 1, 2]).item(), rel=1e-4, abs=1e-5)
    torch.testing.assert_close(got[..., range(10), range(10)], (q * k).sum(-1))
    assert not got.triu(1).any()  # 0 above the diagonal


@pytest.mark.parametrize("rows", [1, 5, 16, 64, 100, 150])
def test_path_by_blocks_of_rows_equals_the_explicit_logits(rows):
    """Outside autograd PaTH's logits come by blocks of query rows (the UT/WY form of each block's transforms, the
    earlier keys carried through them): the explicit O(T²) logits to 1e-5 of their largest, for blocks that divide
    T = 150 and blocks that do not, a block asked for out of order, and the whole at once."""
    from pe_bench.schemes.path import PathRows, path_logits

    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 3, 150, 8, generator=g), torch.randn(2, 3, 150, 8, generator=g)
    w = torch.nn.functional.normalize(torch.randn(2, 3, 150, 8, generator=g), dim=-1)
    beta = 2 * torch.rand(2, 3, 150, generator=g)
    want = ((path_logits(q, k, w, beta) - q @ k.transpose(-1, -2)) / 8 ** 0.5).tril()
    tol = 1e-5 * want.abs().max().item()
    got = torch.zeros_like(want)
    with torch.no_grad():
        by_rows = PathRows(q, k, w, beta)
        for i in range(0, 150, rows):
            j = min(150, i + rows)
            got[..., i:j, :j] = by_rows.block(i, j)
        torch.testing.assert_close(got.tril(), want, rtol=0, atol=tol)
        torch.testing.assert_close(by_rows.block(70, 90).tril(70), want[..., 70:90, :90], rtol=0, atol=tol)  # again
        whole = PathRows(q, k, w, beta).full()
        torch.testing.assert_close(whole.tril(), want, rtol=0, atol=tol)
        assert not whole.triu(1).any()  # 0 past the diagonal
        torch.testing.assert_close(PathRows(q, k, w, beta).block(70, 90).tril(70), want[..., 70:90, :90], rtol=0,
                                   atol=tol)


@pytest.mark.parametrize("scheme", ["path", "pope", "fox", "stickbreaking", "dape", "fire"])
@pytest.mark.parametrize("rows", [1, 7, 16, 40])
def test_a_model_evaluated_by_blocks_of_query_rows_gives_the_numbers_it_trains_with(scheme, rows, monkeypatch):
    """The 2025 schemes (and FIRE) at evaluation go by blocks of query rows (a bias or the weights by rows, PaTH's
    transforms in the UT/WY form by chunks): a model's logits with the budgets set so that each block holds ``rows``
    rows — blocks that divide T = 80 and blocks that do not — equal its logits under autograd (the whole form) to
    1e-5. PaTH's chunk is set to ``rows`` too."""
    from pe_bench.build import build_model
    from pe_bench.model import attention
    from pe_bench.schemes import path

    B, H, T = 2, 2, 80
    monkeypatch.setattr(attention, "MASK_BUDGET", rows * B * H * T * 4)
    monkeypatch.setattr(attention, "EXPLICIT_BUDGET", rows * H * T * 4)
    monkeypatch.setattr(path, "PATH_ROWS", rows)
    cfg = compose([f"scheme={scheme}", "model.n_layers=2", "model.d_model=32", f"model.n_heads={H}"])
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=64)
    x = torch.randint(0, 64, (B, T), generator=torch.Generator().manual_seed(1))
    trained = model(x).detach()
    with torch.no_grad():
        evaluated = model(x)
    torch.testing.assert_close(evaluated, trained, rtol=1e-5, atol=1e-5)


def test_path_transforms_are_unit_and_causal():
    """w is unit-norm per head and β in (0, 2); w_t reads x_{t−2..t} only (the causal convolution of width 3)."""
    from pe_bench.schemes.path import PaTH, PaTHOptions

    torch.manual_seed(0)  # the transforms' initial weights: the same whatever ran before
    path = PaTH(PaTHOptions(), ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=16, n_layers=1))
    x = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(1))
    w, beta = path.transforms[0](x)
    torch.testing.assert_close(w.norm(dim=-1), torch.ones(1, 2, 12), rtol=1e-4, atol=1e-4)
    assert (beta > 0).all() and (beta < 2).all()
    later = x.clone()
    later[:, 8:] += 1.0
    w2, _ = path.transforms[0](later)
    torch.testing.assert_close(w2[:, :, :8], w[:, :, :8], rtol=0, atol=0)
    assert not torch.allclose(w2[:, :, 8], w[:, :, 8])
    w0, beta0 = path.transforms[0](torch.zeros(1, 4, 16))
    assert not w0.any()  # a zero input: the zero direction (H_t = I), not 0/0
    torch.testing.assert_close(beta0, 2 * torch.sigmoid(path.transforms[0].beta.bias)[None, :, None].expand(1, 2, 4))


def test_path_transforms_have_the_papers_parameters_and_no_others():
    """Per layer: the low-rank map d_model → rank → H·d without biases, a depthwise causal convolution of width
    conv_size without bias, and β's linear map d_model → H with its bias."""
    from pe_bench.schemes.path import PaTH, PaTHOptions

    opts = PaTHOptions()
    path = PaTH(opts, ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=16, n_layers=1))
    got = {name: tuple(p.shape) for name, p in path.transforms[0].named_parameters()}
    assert got == {"down.weight": (opts.rank, 16), "up.weight": (16, opts.rank), "conv.weight": (16, 1, opts.conv_size),
                   "beta.weight": (2, 16), "beta.bias": (2,)}


def test_log_n_scales_by_ln_n_over_ln_l_from_any_training_length():
    import math

    from pe_bench.model.decoder import logn_beyond

    scale = logn_beyond(torch.arange(8), 2)
    assert torch.allclose(scale, torch.tensor([1.0, 1.0] + [math.log(n) / math.log(2) for n in range(3, 9)]))


def test_pope_frequencies_are_float64_and_only_the_keys_carry_the_clamped_phase_bias():
    """θ_c = b^(−c/d) in float64; δ is the keys' alone, clamped to [−2π, 0] (a δ above 0 acts as 0, below −2π as
    −2π); without it (phase_bias: false) keys and queries share their phases; θ is no checkpoint entry; the output
    keeps the input's dtype; a call without a layer is layer 0's."""
    from pe_bench.schemes.pope import PoPE, PoPEOptions, pope_frequencies

    theta = pope_frequencies(8, 100.0)
    assert theta.dtype == torch.float64
    assert theta.tolist() == [100.0 ** (-c / 8) for c in range(8)]
    shape = ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=16, n_layers=2)
    pope = PoPE(PoPEOptions(), shape)
    assert set(pope.state_dict()) == {"delta"}
    g = torch.Generator().manual_seed(0)
    q, k, pos = torch.randn(1, 2, 5, 8, generator=g), torch.randn(1, 2, 5, 8, generator=g), torch.arange(5)
    plain = PoPE(PoPEOptions(phase_bias=False), shape)
    assert plain.delta is None and set(plain.state_dict()) == set()
    q0, k0 = plain.rotate(q, k, pos)
    torch.testing.assert_close(q0, PoPE(PoPEOptions(phase_bias=False), shape).rotate(k, q, pos)[1] * math.sqrt(2))
    with torch.no_grad():
        pope.delta[1].fill_(0.5)  # above 0: clamped to 0
        pope.delta[0].fill_(-10.0)  # below −2π: clamped to −2π, a whole turn
    for layer in (0, 1):
        got_q, got_k = pope.rotate(q, k, pos, layer)
        torch.testing.assert_close(got_q, q0)
        torch.testing.assert_close(got_k, k0, rtol=0, atol=1e-5)
    torch.testing.assert_close(pope.rotate(q, k, pos)[1], pope.rotate(q, k, pos, 0)[1])
    with torch.no_grad():
        pope.delta[0].fill_(-1.0)
    assert not torch.allclose(pope.rotate(q, k, pos)[1], k0)  # a phase bias inside the range acts
    torch.testing.assert_close(pope.rotate(q, k, pos)[1], pope.rotate(q, k, pos, 0)[1])
    assert all(x.dtype == torch.bfloat16 for x in pope.rotate(q.bfloat16(), k.bfloat16(), pos))


def test_fope_keeps_the_frequencies_completing_a_period_within_L_and_with_none_is_a_fixed_transform():
    """ω >= 2π/L kept (a frequency of exactly that period too); L below 2π keeps none: no coefficients, every pair
    padded with C = S = 1 (x ↦ x + rotate_half(x) at every position); an odd head dimension is refused by name; ω is
    no checkpoint entry, the coefficients are; the output keeps the input's dtype."""
    from pe_bench.schemes.fope import FoPE, FoPEOptions, fourier_coefficients, kept_frequencies, step_identity
    from pe_bench.schemes.rope import inv_freq

    base = 103.75289204975388  # ω_1 = base^(−1/2) is 2π/64 to the last bit
    assert inv_freq(4, base)[1].item() == 2 * math.pi / 64
    assert kept_frequencies(4, base, 64).tolist() == inv_freq(4, base).tolist()
    assert kept_frequencies(4, base, 63).tolist() == [1.0]
    assert kept_frequencies(4, base, 6).numel() == 0
    assert step_identity(0, 0).shape == (0, 0) and step_identity(3, 0).shape == (3, 0)
    assert fourier_coefficients(2, 3, 0, 0, 0.3).shape == (2, 3, 0, 0)
    fope = FoPE(FoPEOptions(), ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=6, n_layers=2))
    assert fope.omega.numel() == 0 and tuple(fope.cos_coef.shape) == (2, 2, 0, 0)
    assert set(fope.state_dict()) == {"cos_coef", "sin_coef"}
    x = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(0))
    turned = torch.cat([-x[..., 4:], x[..., :4]], -1)
    q, k = fope.rotate(x, x, torch.arange(5), 1)
    torch.testing.assert_close(q, x + turned)
    torch.testing.assert_close(k, x + turned)
    assert all(y.dtype == torch.bfloat16 for y in fope.rotate(x.bfloat16(), x.bfloat16(), torch.arange(5)))
    with pytest.raises(ValueError, match="^fope rotates pairs"):
        FoPE(FoPEOptions(), ModelShape(d_model=14, n_heads=2, head_dim=7, train_seq_len=16))


@pytest.mark.parametrize("scheme", ["hybrid", "layered"])
def test_a_hybrid_or_layered_pattern_hands_path_its_own_inputs_and_layer(scheme):
    """PaTH's logits read the layer input x (its transforms), q, k and the layer: a pattern holding it (hybrid: every
    layer; layered: the layers it is assigned, here layer 0) gives PaTH's own terms there."""
    from pe_bench.build import build_model

    cfg = compose([f"scheme={scheme}", "scheme.parts=[{name: path}, {name: alibi}]", "model.n_layers=2",
                   "model.d_model=32", "model.n_heads=2"])
    torch.manual_seed(0)
    pattern = build_model(cfg, vocab_size=64).scheme
    path = pattern.parts[0]
    g = torch.Generator().manual_seed(1)
    x, q, k = torch.randn(1, 6, 32, generator=g), torch.randn(1, 2, 6, 16, generator=g), torch.randn(1, 2, 6, 16, generator=g)
    with torch.enable_grad():
        want = path.token_terms(x, q, k, 0)
        torch.testing.assert_close(pattern.token_terms(x, q, k, 0), want)
        if scheme == "hybrid":
            torch.testing.assert_close(pattern.token_terms(x, q, k, 1), path.token_terms(x, q, k, 1))
            assert not torch.allclose(path.token_terms(x, q, k, 1), want)  # each layer its own transforms
