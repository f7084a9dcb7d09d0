"""The FlexAttention hooks of the schemes, evaluated eagerly: each scheme's ``score_mod`` gives, at every causal
(query, key) pair, the explicit path's scores (q·k/√d + ``score_bias`` + ``score_terms``), and ``flex_problem``
refuses exactly the schemes FlexAttention cannot express. Layered's per-layer hooks are its layer's part's.

No torch.compile and no flex_attention: a score_mod is applied the way FlexAttention's eager reference applies it
(torch._higher_order_ops.flex_attention.math_attention): vmapped over (b, h, q_idx, kv_idx) by
``_vmap_for_bhqkv`` under ``TransformGetItemToIndex``, at every pair, the future ones included (the causal block
mask only discards them afterwards), so an index out of a table's range fails here as it does there."""

from __future__ import annotations

import pytest
import torch
import yaml
from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
from torch.nn.attention.flex_attention import _vmap_for_bhqkv

from pe_bench import schemes
from pe_bench.config import config_dir, scheme_spec, with_options
from pe_bench.schemes import ModelShape

B, H, D, T, N_LAYERS = 2, 4, 8, 12, 2  # H, D and T differ, so a size read from the wrong dimension shows

# 0..T−1 (the forward's own positions), and positions that increase with gaps from an offset (randomized positions,
# PoSE): their span (39) is past T and past Shaw's clipping distance (20); the same gaps shifted to start below 0 (the
# scores of a relative scheme depend on differences only, so the table must span the distances, not the last position).
GAPS = torch.tensor([0, 1, 4, 5, 9, 10, 14, 19, 25, 30, 34, 39])
POSITIONS = {
    "0..T-1": torch.arange(T),
    "gaps": GAPS + 3,
    "gaps from -9": GAPS - 9,
}

# Every scheme with a score_mod, composed ones included.
CASES = [
    ("alibi", None),
    ("t5", None),
    ("kerple_log", None),  # per-layer parameters: a score_mod of the wrong layer shows
    ("kerple_power", None),
    ("sandwich", None),
    ("fire", None),  # not a function of i − j: the score_mod evaluates score_bias at each pair
    ("shaw", {"values": False}),
    ("xl", None),
    ("hybrid", {"parts": [{"name": "rope"}, {"name": "t5"}]}),
    ("hybrid", {"parts": [{"name": "sinusoidal"}, {"name": "xl"}]}),
    ("layered", {"parts": [{"name": "shaw", "values": False}, {"name": "xl"}], "pattern": [0, 1]}),
    ("layered", {"parts": [{"name": "alibi"}, {"name": "kerple_log"}, {"name": "fire"}], "pattern": [1, 2]}),
]


def case_id(case) -> str:
    name, options = case
    if not options:
        return name
    if "parts" in options:
        return f"{name}-" + "-".join(p["name"] for p in options["parts"])
    return f"{name}-" + "-".join(f"{k}={v}" for k, v in options.items())


def build(name: str, options: dict | None = None, seed: int = 0) -> schemes.Scheme:
    """The scheme as configs/scheme/<name>.yaml (and ``options``) builds it, every parameter perturbed (zero tables,
    as T5's and CoPE's, would hide a wrong term; the layers' parameters differ)."""
    spec = scheme_spec(yaml.safe_load((config_dir() / "scheme" / f"{name}.yaml").read_text()))
    if options:
        spec = with_options(spec, options)
    torch.manual_seed(seed)
    scheme = spec.cls(spec.options, ModelShape(d_model=32, n_heads=H, head_dim=D, train_seq_len=8, n_layers=N_LAYERS))
    with torch.no_grad():
        for p in scheme.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return scheme


def qk(dtype: torch.dtype = torch.float32, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, T, D, generator=g, dtype=dtype), torch.randn(B, H, T, D, generator=g, dtype=dtype)


def flex_eager(mod, scores: torch.Tensor) -> torch.Tensor:
    """``mod`` applied to every entry of ``scores`` (B, H, Tq, Tk) as FlexAttention's eager reference applies it."""
    idx = [torch.arange(n) for n in scores.shape]
    with TransformGetItemToIndex():
        return _vmap_for_bhqkv(mod, prefix=(0,))(scores, *idx)


def explicit_scores(scheme, q, k, positions, layer) -> torch.Tensor:
    """The explicit backend's logits before the causal mask: q·k/√d + score_bias + score_terms."""
    scores = (q @ k.transpose(-1, -2)) * D**-0.5
    bias = scheme.score_bias(positions, positions, layer)
    if bias is not None:
        scores = scores + bias
    terms = scheme.score_terms(q, k, positions, positions, layer)
    if terms is not None:
        scores = scores + terms
    return scores


def causal(positions: torch.Tensor) -> torch.Tensor:
    return positions[None, :] <= positions[:, None]


# ---- score_mod ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", list(POSITIONS))
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_score_mod_gives_the_explicit_paths_scores_at_every_causal_pair(case, where):
    """score_mod(score, b, h, q_idx, kv_idx) = the explicit backend's logit at (b, h, q_idx, kv_idx), every layer,
    at the forward's own positions and at increasing positions with gaps (distances up to their span)."""
    scheme = build(*case)
    positions = POSITIONS[where]
    q, k = qk()
    seen = []
    for layer in range(N_LAYERS):
        mod = scheme.score_mod(q, k, positions, layer)
        assert mod is not None
        scores = (q @ k.transpose(-1, -2)) * D**-0.5
        out = flex_eager(mod, scores)
        assert out.shape == scores.shape and out.dtype == scores.dtype
        ref = explicit_scores(scheme, q, k, positions, layer)
        keep = causal(positions)
        # the hooks' tables are fp32 (FlexAttention's working precision): 1e-5, the backends' tolerance
        torch.testing.assert_close(out[..., keep], ref[..., keep], rtol=0, atol=1e-5)
        seen.append(out[..., keep])
    if any(p.numel() for p in scheme.parameters()) and case[0] not in ("alibi", "t5", "sandwich", "hybrid"):
        # per-layer parameters (or a part per layer): the layers' scores differ, so each layer's mod is its own
        assert not torch.allclose(seen[0], seen[1], atol=1e-3)


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple_log", "sandwich", "xl"])
def test_traced_by_torch_compile_the_distance_table_spans_the_forwards_positions(name, monkeypatch):
    """Under torch.compile (positions 0..T−1, no .item()) the per-distance table has T entries and the score_mod
    still gives the explicit scores."""
    scheme = build(name)
    positions = torch.arange(T)
    q, k = qk()
    with monkeypatch.context() as m:
        m.setattr(torch.compiler, "is_compiling", lambda: True)
        mods = [scheme.score_mod(q, k, positions, layer) for layer in range(N_LAYERS)]
    for layer, mod in enumerate(mods):
        scores = (q @ k.transpose(-1, -2)) * D**-0.5
        keep = causal(positions)
        ref = explicit_scores(scheme, q, k, positions, layer)
        torch.testing.assert_close(flex_eager(mod, scores)[..., keep], ref[..., keep], rtol=0, atol=1e-5)


def test_lower_toeplitz_expands_a_distance_table_and_sums_the_diagonals_back():
    """[h, i, j] = table[h, n − 1 − (i − j)] on and below the diagonal, 0 above; its backward is the gradient of that
    gather (torch.autograd.gradcheck in float64 against finite differences)."""
    from pe_bench.schemes.base import LowerToeplitz

    g = torch.Generator().manual_seed(0)
    table = torch.randn(3, 7, generator=g, dtype=torch.float64, requires_grad=True)
    m = LowerToeplitz.apply(table)
    for i in range(7):
        for j in range(7):
            torch.testing.assert_close(m[:, i, j], table[:, 6 - (i - j)] if j <= i else torch.zeros(3, dtype=m.dtype))
    assert torch.autograd.gradcheck(LowerToeplitz.apply, (table,))
    w = torch.randn(3, 7, 7, generator=g, dtype=torch.float64)
    (m * w).sum().backward()
    want = torch.stack([sum(w[:, i, i - d] for i in range(d, 7)) for d in range(7)], -1).flip(-1)  # index 6 − d
    torch.testing.assert_close(table.grad, want)


@pytest.mark.parametrize("case", [("t5", None), ("kerple_log", None), ("kerple_power", None),
                                  ("hybrid", {"parts": [{"name": "rope"}, {"name": "t5"}]})], ids=case_id)
def test_a_learned_tables_score_mod_by_pair_and_by_distance_give_the_same_scores_and_gradients(case, monkeypatch):
    """FLEX_LEARNED_TABLE "matrix" (the Toeplitz matrix, one entry per pair) and "distance" (the (H, n) table) are the
    same function: equal scores and equal gradients of the scheme's parameters through FlexAttention's eager
    reference of the score_mod."""
    from pe_bench.schemes import base

    positions = torch.arange(T)
    q, k = qk()
    w = torch.randn(B, H, T, T, generator=torch.Generator().manual_seed(2))
    keep = causal(positions)
    out, grads = {}, {}
    expanded = []
    monkeypatch.setattr(base.LowerToeplitz, "apply", lambda t, apply=base.LowerToeplitz.apply: expanded.append(
        t.shape) or apply(t))
    for mode in ("matrix", "distance"):
        scheme = build(*case)
        monkeypatch.setattr(base, "FLEX_LEARNED_TABLE", mode)
        scores = (q @ k.transpose(-1, -2)) * D**-0.5
        out[mode] = torch.stack([flex_eager(scheme.score_mod(q, k, positions, layer), scores)[..., keep]
                                 for layer in range(N_LAYERS)])
        (out[mode] * w[..., keep]).sum().backward()
        grads[mode] = [p.grad.clone() for p in scheme.parameters()]
    assert expanded == [(H, T)] * N_LAYERS  # the matrix mode took its branch (once per layer), the other did not
    torch.testing.assert_close(out["matrix"], out["distance"], rtol=0, atol=1e-5)
    assert grads["matrix"] and all(g.abs().sum() > 0 for g in grads["matrix"])
    for a, b in zip(grads["matrix"], grads["distance"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", [("nope", None), ("rope", None), ("sinusoidal", None), ("xpos", None),
                                  ("ssmax", None), ("conv", None), ("learned", None), ("layered", None),
                                  ("hybrid", {"parts": [{"name": "sinusoidal"}, {"name": "rope"}]})], ids=case_id)
def test_a_scheme_that_leaves_the_scores_alone_has_no_score_mod(case):
    scheme = build(*case)
    q, k = qk()
    for layer in range(N_LAYERS):
        assert scheme.score_mod(q, k, torch.arange(T), layer) is None


def test_shaw_score_mod_clips_distances_beyond_k_to_the_last_vector():
    """Shaw et al. 2018, eq. 4–5 (keys): e_ij += q_i·w^K_clip(i−j, k) / √d, computed here from the table itself."""
    scheme = build("shaw", {"values": False, "max_distance": 3})
    positions = POSITIONS["gaps"]
    q, k = qk(torch.float64)
    for layer in range(N_LAYERS):
        out = flex_eager(scheme.score_mod(q, k, positions, layer), torch.zeros(B, H, T, T, dtype=torch.float64))
        w = scheme.key_table[layer].detach().double()  # (k + 1, D)
        for i in range(T):
            for j in range(i + 1):
                r = min(int(positions[i] - positions[j]), 3)
                torch.testing.assert_close(out[:, :, i, j], q[:, :, i] @ w[r] / D**0.5, rtol=0, atol=1e-6)


def test_xl_score_mod_adds_the_papers_position_and_content_bias_terms():
    """Dai et al. 2019, §3.3: A_ij − q_i·k_j = u·k_j + (q_i + v)·W_R R_{i−j} (terms (c), (b)+(d)), all / √d, with R the
    sinusoidal table of Vaswani et al. 2017, §3.5 (PE(r, 2m) = sin, PE(r, 2m + 1) = cos), built here independently."""
    scheme = build("xl")
    positions = POSITIONS["gaps"]
    q, k = qk(torch.float64)
    C, base = 32, scheme.options.base
    for layer in range(N_LAYERS):
        out = flex_eager(scheme.score_mod(q, k, positions, layer), torch.zeros(B, H, T, T, dtype=torch.float64))
        W = scheme.r_proj[layer].detach().double()
        u, v = scheme.u.detach().double(), scheme.v.detach().double()
        inv = base ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)
        for i in (0, 5, T - 1):
            for j in range(i + 1):
                angle = float(positions[i] - positions[j]) * inv
                R = torch.stack([angle.sin(), angle.cos()], -1).flatten()  # (C,): sin, cos interleaved
                WR = (R @ W).view(H, D)
                want = ((u[None] * k[:, :, j]).sum(-1) + ((q[:, :, i] + v[None]) * WR[None]).sum(-1)) / D**0.5
                torch.testing.assert_close(out[:, :, i, j], want, rtol=0, atol=1e-5)


# ---- flex_problem ------------------------------------------------------------------------------------------------
REFUSED = {
    "cope": "its positions are sums of gates over the other keys of the row, not a function of one score",
    "dape": "its score terms have no score_mod",
    "fire": "its MLP per (query, key) pair does not compile into FlexAttention's kernels (torch 2.11, CUDA)",
    "fox": "its bias is computed from the layer input, which score_mod does not see",
    "path": "its bias is computed from the layer input, which score_mod does not see",
    "shaw": "its value vectors a^V need the attention weights (scheme.values=false has a score_mod)",
    "stickbreaking": "it replaces the softmax, which FlexAttention computes itself",
}


@pytest.mark.parametrize("name", schemes.available())
def test_flex_problem_refuses_exactly_the_schemes_flex_cannot_express_with_their_reason(name):
    assert build(name).flex_problem() == REFUSED.get(name)


@pytest.mark.parametrize("case, reason", [
    (("shaw", {"values": False}), None),  # keys only: a score_mod
    (("hybrid", {"parts": [{"name": "sinusoidal"}, {"name": "xl"}]}), None),
    (("hybrid", {"parts": [{"name": "rope"}, {"name": "cope"}]}), "cope: " + REFUSED["cope"]),
    (("hybrid", {"parts": [{"name": "alibi"}, {"name": "fox"}]}), "fox: " + REFUSED["fox"]),
    (("layered", {"parts": [{"name": "rope"}, {"name": "stickbreaking"}], "pattern": [0, 1]}),
     "stickbreaking: " + REFUSED["stickbreaking"]),
    (("layered", {"parts": [{"name": "rope"}, {"name": "dape"}], "pattern": [0, 1]}), "dape: " + REFUSED["dape"]),
    (("layered", {"parts": [{"name": "alibi"}, {"name": "shaw", "values": False}]}), None),
], ids=lambda c: case_id(c) if isinstance(c, tuple) else "")
def test_flex_problem_of_variants_and_compositions(case, reason):
    assert build(*case).flex_problem() == reason


def test_flex_problem_names_what_a_new_scheme_needs_that_score_mod_cannot_give():
    """The default refusals follow the hooks a scheme overrides, not its name."""

    class Terms(schemes.Scheme):  # score terms and no score_mod of its own
        def score_terms(self, q, k, q_pos, k_pos, layer):
            return torch.zeros(q.shape[:-1] + (k.shape[2],))

    class TermsWithMod(Terms):
        def score_mod(self, q, k, positions, layer):
            return lambda score, b, h, q_idx, kv_idx: score

    class Weights(schemes.Scheme):
        def attention_weights(self, logits, q_pos, k_pos, layer):
            return logits.softmax(-1)

    class FromInput(schemes.Scheme):
        def input_bias(self, x, layer):
            return None

    shape = ModelShape(d_model=8, n_heads=2, head_dim=4, train_seq_len=8)
    assert Terms(None, shape).flex_problem() == REFUSED["dape"]
    assert TermsWithMod(None, shape).flex_problem() is None
    assert Weights(None, shape).flex_problem() == REFUSED["stickbreaking"]
    assert FromInput(None, shape).flex_problem() == REFUSED["fox"]
    assert schemes.Scheme(None, shape).flex_problem() is None


# ---- Layered: each hook is its layer's part's ----------------------------------------------------------------------
def test_layered_attention_weights_are_its_layers_parts():
    """Stick-breaking on layer 1 (without the remainder: the paper's weights alone), the softmax (None) on layer 0
    (Tan et al. 2024, eq. 1–3 on layer 1's rows)."""
    layered = build("layered", {"parts": [{"name": "nope"}, {"name": "stickbreaking", "remainder": False}],
                                "pattern": [0, 1]})
    part = layered.parts[1]
    positions = torch.arange(T)
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(B, H, T, T, generator=g).masked_fill(~causal(positions), float("-inf"))
    assert layered.attention_weights(logits, positions, positions, 0) is None
    got = layered.attention_weights(logits, positions, positions, 1)
    torch.testing.assert_close(got, part.attention_weights(logits, positions, positions, 1), rtol=0, atol=0)
    # A_ij = σ(z_ij) Π_{j<m<i} (1 − σ(z_im)), j < i; nothing on the diagonal and the future
    beta = logits.sigmoid()
    for i in (0, 1, 6, T - 1):
        for j in range(T):
            want = beta[..., i, j] * torch.prod(1 - beta[..., i, j + 1:i], -1) if j < i else torch.zeros(B, H)
            torch.testing.assert_close(got[..., i, j], want, rtol=1e-5, atol=1e-6)


def test_layered_value_terms_are_its_layers_parts():
    """Shaw's a^V on layer 1 (Shaw et al. 2018, eq. 3: z_i += Σ_j α_ij w^V_clip(i−j, k)), none on layer 0."""
    layered = build("layered", {"parts": [{"name": "nope"}, {"name": "shaw", "max_distance": 3}], "pattern": [0, 1]})
    shaw = layered.parts[1]
    positions = POSITIONS["gaps"]
    g = torch.Generator().manual_seed(3)
    probs = torch.rand(B, H, T, T, generator=g).masked_fill(~causal(positions), 0.0)
    assert layered.value_terms(probs, positions, positions, 0) is None
    got = layered.value_terms(probs, positions, positions, 1)
    assert got.shape == (B, H, T, D)
    torch.testing.assert_close(got, shaw.value_terms(probs, positions, positions, 1), rtol=0, atol=0)
    w = shaw.value_table[1].detach()  # (k + 1, D)
    clip = (positions[:, None] - positions[None, :]).clamp(0, 3)  # (T, T)
    want = torch.einsum("bhij,ijd->bhid", probs, w[clip])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_layered_score_mod_is_none_on_a_layer_whose_part_leaves_the_scores_alone():
    layered = build("layered", {"parts": [{"name": "rope"}, {"name": "xl"}], "pattern": [0, 1]})
    q, k = qk()
    positions = torch.arange(T)
    assert layered.score_mod(q, k, positions, 0) is None
    mod = layered.score_mod(q, k, positions, 1)
    keep = causal(positions)
    want = explicit_scores(layered.parts[1], q, k, positions, 1)
    scores = (q @ k.transpose(-1, -2)) * D**-0.5
    torch.testing.assert_close(flex_eager(mod, scores)[..., keep], want[..., keep], rtol=0, atol=1e-5)
