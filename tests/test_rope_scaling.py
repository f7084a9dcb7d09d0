"""RoPE context extension: the scaled frequencies equal the published definitions, computed here one frequency at
a time with plain math (not with any library's implementation)."""

import math

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.rope import RoPE, RoPEOptions, RoPEScaling, scaled_inv_freq, yarn_correction_range, yarn_mscale


def thetas(d, b):
    return [b ** (-2 * k / d) for k in range(d // 2)]


def freqs(type_, d=64, b=10000.0, L=512, ell=512, **kw):
    f, attention = scaled_inv_freq(d, b, RoPEScaling(type=type_, **kw), L, ell)
    return f.tolist(), attention


def test_none_is_plain_rope():
    assert freqs("none")[0] == pytest.approx(thetas(64, 1e4), rel=1e-12)


def test_linear_divides_every_frequency_by_s():
    f, att = freqs("linear", factor=8)
    assert f == pytest.approx([t / 8 for t in thetas(64, 1e4)], rel=1e-12) and att == 1.0


def test_ntk_rescales_the_base_by_s_to_the_d_over_d_minus_2():
    f, _ = freqs("ntk", factor=8)
    b = 1e4 * 8 ** (64 / 62)
    assert f == pytest.approx(thetas(64, b), rel=1e-12)
    assert f[0] == 1.0 and f[-1] == pytest.approx(thetas(64, 1e4)[-1] / 8, rel=1e-12)  # lowest frequency: θ/s


@pytest.mark.parametrize("ell", [100, 512])
def test_dynamic_ntk_is_plain_rope_up_to_the_training_length(ell):
    assert freqs("dynamic", factor=1, ell=ell)[0] == pytest.approx(thetas(64, 1e4), rel=1e-12)


@pytest.mark.parametrize("factor,ell", [(1, 4096), (2, 1024), (4, 3000)])
def test_dynamic_ntk_base_grows_with_the_current_length(factor, ell):
    b = 1e4 * (factor * ell / 512 - (factor - 1)) ** (64 / 62)
    assert freqs("dynamic", factor=factor, ell=ell)[0] == pytest.approx(thetas(64, b), rel=1e-12)


def test_yarn_ramp_bounds_and_temperature_match_the_paper():
    assert yarn_correction_range(64, 1e4, 512, 32, 1) == (3, 16)
    assert yarn_correction_range(128, 1e4, 4096, 32, 1) == (20, 46)
    assert yarn_mscale(8) == pytest.approx(1.2079, abs=1e-4)
    assert round(0.1 * math.log(8) + 1, 3) == 1.208


def test_yarn_frequencies_blend_interpolation_and_extrapolation_by_the_ramp():
    f, attention = freqs("yarn", factor=8)
    theta = thetas(64, 1e4)
    for k in range(32):
        ramp = min(max((k - 3) / (16 - 3), 0.0), 1.0)  # 0 below dim 3 (kept), 1 from dim 16 on (interpolated)
        assert f[k] == pytest.approx(theta[k] / 8 * ramp + theta[k] * (1 - ramp), rel=1e-12), k
    assert f[:4] == pytest.approx(theta[:4]) and f[16:] == pytest.approx([t / 8 for t in theta[16:]])
    assert attention == pytest.approx(0.1 * math.log(8) + 1)


def test_llama3_frequencies():
    """Llama 3.1 defaults: s=8, low_ff=1, high_ff=4, L_orig=8192, base 500000, d=128."""
    f, _ = freqs("llama3", d=128, b=500000.0, L=8192, factor=8)
    n_high = n_low = n_mid = 0
    for k, t in enumerate(thetas(128, 500000.0)):
        wavelen = 2 * math.pi / t
        if wavelen < 8192 / 4:
            expected, n_high = t, n_high + 1
        elif wavelen > 8192 / 1:
            expected, n_low = t / 8, n_low + 1
        else:
            mu = (8192 / wavelen - 1) / (4 - 1)
            expected, n_mid = (1 - mu) * t / 8 + mu * t, n_mid + 1
        assert f[k] == pytest.approx(expected, rel=1e-12), k
    assert n_high and n_low and n_mid  # all three regimes exercised


def rope(**scaling):
    return RoPE(RoPEOptions(scaling=RoPEScaling(**scaling)),
                ModelShape(d_model=64, n_heads=2, head_dim=32, train_seq_len=64))


@pytest.mark.parametrize("scaling,label", [
    ({}, "rope"),
    ({"type": "yarn", "factor": 8}, "rope+yarn×8"),
    ({"type": "linear", "factor": 4}, "rope+linear×4"),
    ({"type": "dynamic", "factor": 1}, "rope+dynamic"),
    ({"type": "dynamic", "factor": 2}, "rope+dynamic×2"),
    ({"type": "llama3", "factor": 8, "high_freq_factor": 8.0}, "rope+llama3×8[high_freq_factor=8.0]"),
    ({"resonance": True}, "rope+resonance"),
    ({"type": "yarn", "factor": 8, "resonance": True}, "rope+yarn×8+resonance"),
    ({"type": "yarn", "factor": 8, "attention_factor": 1.0}, "rope+yarn×8[attention_factor=1.0]"),
])
def test_labels_name_the_extension(scaling, label):
    assert rope(**scaling).label() == label


def test_original_length_defaults_to_the_training_length():
    assert rope(type="yarn", factor=8).original_length == 64
    assert rope(type="yarn", factor=8, original_length=128).original_length == 128


def test_yarn_temperature_scales_q_and_k():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 5, 32, generator=g)
    qr, _ = rope(type="yarn", factor=8).rotate(q, q, torch.arange(5))
    torch.testing.assert_close(qr.norm(dim=-1), q.norm(dim=-1) * yarn_mscale(8))


def test_dynamic_uses_the_current_length():
    r, plain = rope(type="dynamic", factor=1), rope()
    q = torch.randn(1, 1, 256, 32)
    short = torch.arange(64)
    torch.testing.assert_close(r.rotate(q[:, :, :64], q[:, :, :64], short)[0], plain.rotate(q[:, :, :64],
                                                                                               q[:, :, :64], short)[0])
    ntk4 = rope(type="ntk", factor=4)
    long = torch.arange(256)
    torch.testing.assert_close(r.rotate(q, q, long)[0], ntk4.rotate(q, q, long)[0])  # ℓ = 4L ≡ NTK with s = 4


def test_bad_scaling_is_rejected():
    with pytest.raises(ValueError, match="scaling.type must be one of"):
        RoPEScaling(type="su")
    with pytest.raises(ValueError, match="needs scheme.scaling.long_factor and scheme.scaling.short_factor"):
        RoPEScaling(type="longrope", factor=8)
    with pytest.raises(ValueError, match="factor must be >= 1"):
        RoPEScaling(type="linear", factor=0.5)


def test_resonance_rounds_every_wavelength_to_an_integer_by_hand():
    """d = 8, b = 10⁴: θ = 1, 0.1, 0.01, 0.001 have wavelengths 2π/θ = 6.283, 62.83, 628.3, 6283.2, rounded to
    6, 63, 628, 6283 (Wang et al. 2024, Resonance RoPE): θ' = 2π/6, 2π/63, 2π/628, 2π/6283."""
    r = RoPE(RoPEOptions(scaling=RoPEScaling(resonance=True)), ModelShape(d_model=8, n_heads=1, head_dim=8,
                                                                          train_seq_len=64))
    assert r.theta.tolist() == pytest.approx([2 * math.pi / n for n in (6, 63, 628, 6283)], rel=1e-12)
    # every pair repeats exactly after its integer wavelength: position p + 6 is position p for the first pair
    q = torch.randn(1, 1, 1, 8, generator=torch.Generator().manual_seed(0))
    at = lambda p: r.rotate(q, q, torch.tensor([p]))[0][..., [0, 4]]  # noqa: E731 - the first pair (layout half)
    torch.testing.assert_close(at(70), at(64), rtol=0, atol=1e-5)


def test_resonance_rounds_the_scaled_wavelengths_of_yarn():
    """With YaRN the rounding acts on YaRN's frequencies (the stacked `rope+yarn×8+resonance`), and YaRN's
    temperature is kept."""
    shape = ModelShape(d_model=64, n_heads=2, head_dim=32, train_seq_len=64)
    yarn = RoPE(RoPEOptions(scaling=RoPEScaling(type="yarn", factor=8)), shape)
    both = RoPE(RoPEOptions(scaling=RoPEScaling(type="yarn", factor=8, resonance=True)), shape)
    torch.testing.assert_close(both.theta, 2 * math.pi / torch.round(2 * math.pi / yarn.theta))
    assert both.attention == yarn.attention == yarn_mscale(8)


def test_yarn_without_its_temperature_is_ntk_by_parts_alone():
    """`attention_factor: 1`: YaRN's frequencies, no temperature (q and k keep their norms)."""
    shape = ModelShape(d_model=64, n_heads=2, head_dim=32, train_seq_len=64)
    parts = RoPE(RoPEOptions(scaling=RoPEScaling(type="yarn", factor=8, attention_factor=1.0)), shape)
    yarn = RoPE(RoPEOptions(scaling=RoPEScaling(type="yarn", factor=8)), shape)
    torch.testing.assert_close(parts.theta, yarn.theta, rtol=0, atol=0)
    q = torch.randn(1, 1, 5, 32, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(parts.rotate(q, q, torch.arange(5))[0].norm(dim=-1), q.norm(dim=-1))


def hf_rotate(x: torch.Tensor, positions: torch.Tensor, base: float = 1e4) -> torch.Tensor:
    """Hugging Face's rotary form, as the official Self-Extend code uses it: x·cos + rotate_half(x)·sin with the
    angle table cat(p·θ, p·θ)."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    emb = torch.cat([positions[:, None].double() * theta] * 2, -1)
    half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return (x.double() * emb.cos() + half.double() * emb.sin()).float()


def moved_logits(r: RoPE, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The logits of a RoPE model with a logit-acting type: the rotated q·k plus the type's score terms."""
    qr, kr = r.rotate(q, k, pos)
    return (qr @ kr.transpose(-1, -2)) * q.shape[-1] ** -0.5 + r.score_terms(qr, kr, pos, pos, 0)


def qk(T: int = 24, d: int = 16):
    g = torch.Generator().manual_seed(3)
    return torch.randn(1, 2, T, d, generator=g), torch.randn(1, 2, T, d, generator=g)


def logit_rope(r: RoPE, q: torch.Tensor, k: torch.Tensor, i: int, j: int, a: int, b: int) -> torch.Tensor:
    """q_i·R(b − a)·k_j: query i at position a, key j at position b (both heads)."""
    qa = hf_rotate(q[0, :, i:i + 1], torch.tensor([a]))
    kb = hf_rotate(k[0, :, j:j + 1], torch.tensor([b]))
    return (qa @ kb.transpose(-1, -2))[:, 0, 0] * q.shape[-1] ** -0.5


def rope_with(L: int = 8, **scaling) -> RoPE:
    return RoPE(RoPEOptions(scaling=RoPEScaling(**scaling)), ModelShape(d_model=32, n_heads=2, head_dim=16,
                                                                        train_seq_len=L))


@pytest.mark.parametrize("G, w", [(2, 4), (3, 5)])
def test_self_extend_merges_neighbour_and_grouped_logits_as_the_official_code(G, w):
    """LongLM's self_extend_forward: neighbour logits at the true positions where i − j < w, grouped logits with the
    query at ⌊i/G⌋ + w − ⌊w/G⌋ and the key at ⌊j/G⌋ elsewhere (below the diagonal), one softmax over the merge."""
    q, k = qk()
    T, pos = q.shape[2], torch.arange(q.shape[2])
    neighbour = (hf_rotate(q, pos) @ hf_rotate(k, pos).transpose(-1, -2)) * 16 ** -0.5
    group = (hf_rotate(q, pos // G + w - w // G) @ hf_rotate(k, pos // G).transpose(-1, -2)) * 16 ** -0.5
    inside = torch.ones(T, T).tril()
    inside[w:, :-w] -= torch.ones(T - w, T - w).tril()  # the official neighbour mask
    want = torch.where(inside.bool(), neighbour, group)
    got = moved_logits(rope_with(type="self_extend", factor=G, window=w), q, k, pos)
    causal = pos[:, None] >= pos[None, :]
    torch.testing.assert_close(got[..., causal], want[..., causal], rtol=1e-4, atol=1e-4)


def test_lm_infinite_keeps_the_first_keys_and_a_local_window_at_distances_capped_at_L():
    """L = 8, n = 2 global tokens, window w = L: keys j >= 2 farther than 7 are dropped (−∞); the global keys at
    i − j >= 8 are seen at distance 8 exactly; everything else is plain RoPE."""
    q, k = qk()
    pos = torch.arange(q.shape[2])
    r = rope_with(L=8, type="lm_infinite", global_tokens=2)
    got = moved_logits(r, q, k, pos)
    for i, j in [(20, 0), (20, 1), (9, 1), (20, 2), (20, 13), (20, 12), (5, 3), (23, 23)]:
        if i - j >= 8 and j >= 2:
            assert torch.isinf(got[0, :, i, j]).all() and (got[0, :, i, j] < 0).all(), (i, j)
        else:
            a, b = (8, 0) if i - j >= 8 else (i, j)
            torch.testing.assert_close(got[0, :, i, j], logit_rope(r, q, k, i, j, a, b), rtol=1e-4, atol=1e-4)
    assert r.label() == "rope+lm_infinite[global_tokens=2]"


def test_streaming_keeps_sinks_and_recent_keys_at_their_cache_positions():
    """n = 2 sinks, window w = 3: once the cache is full (i >= n + w = 5) a query sees the sinks and its 3 most recent
    keys; a sink j sits at distance n + w − 1 − j = 4 − j (the cache [sink 0, sink 1, i − 2, i − 1, i]), recent keys at
    their true distance, every other key dropped; before that (i <= 4) nothing is evicted or moved."""
    q, k = qk()
    pos = torch.arange(q.shape[2])
    r = rope_with(type="streaming", global_tokens=2, window=3)
    got = moved_logits(r, q, k, pos)
    for i, j in [(20, 0), (20, 1), (20, 18), (20, 17), (20, 2), (5, 0), (5, 2), (4, 1), (4, 0), (3, 0)]:
        full = i >= 5
        if full and i - j >= 3 and j >= 2:
            assert torch.isinf(got[0, :, i, j]).all(), (i, j)
        else:
            a, b = (4, j) if full and i - j >= 3 else (i, j)
            torch.testing.assert_close(got[0, :, i, j], logit_rope(r, q, k, i, j, a, b), rtol=1e-4, atol=1e-4)
    assert rope_with(L=64, type="streaming").window == 60  # n = 4 sinks and L − 4 recent keys: a cache of L


def official_streaming_logits(q: torch.Tensor, k: torch.Tensor, start_size: int, recent_size: int) -> torch.Tensor:
    """mit-han-lab/streaming-llm decoding one token at a time (examples/eval_long_ppl.py): the query attends to the
    cache plus its own key (pos_shift/modify_llama.py: keys at their cache slots 0..len − 1, the query at the
    cache's length before it, HF's position_ids), then StartRecentKVCache (streaming_llm/kv_cache.py) keeps the
    first start_size and last recent_size keys once the cache holds more than start_size + recent_size.
    q, k: (1, H, T, d) -> (H, T, T) logits, −inf for keys not in the cache."""
    H, T = q.shape[1], q.shape[2]
    out = torch.full((H, T, T), float("-inf"))
    cache: list[int] = []
    for i in range(T):
        keys = cache + [i]
        qa = hf_rotate(q[0, :, i:i + 1], torch.tensor([len(cache)]))  # (H, 1, d)
        for slot, j in enumerate(keys):
            kb = hf_rotate(k[0, :, j:j + 1], torch.tensor([slot]))
            out[:, i, j] = (qa @ kb.transpose(-1, -2))[:, 0, 0] * q.shape[-1] ** -0.5
        cache = keys
        if len(cache) > start_size + recent_size:
            cache = cache[:start_size] + cache[len(cache) - recent_size:]
    return out


@pytest.mark.parametrize("n, recent", [(2, 2), (4, 5), (1, 3), (3, 0)])
def test_streaming_equals_the_official_cache_decoding_token_by_token(n, recent):
    """Every row, filling cache included, against the official start/recent cache: window w = recent_size + 1 (the
    query's own key is the newest of the w), sinks n = start_size; the same keys seen, at the same positions."""
    q, k = qk()
    pos = torch.arange(q.shape[2])
    got = moved_logits(rope_with(type="streaming", global_tokens=n, window=recent + 1), q, k, pos)[0]
    got = got.masked_fill(pos[:, None] < pos[None, :], float("-inf"))
    want = official_streaming_logits(q, k, n, recent)
    seen = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), seen)
    torch.testing.assert_close(got[seen], want[seen], rtol=1e-4, atol=1e-4)


def test_self_extend_refuses_a_fractional_group():
    with pytest.raises(ValueError, match="group size G"):
        RoPEScaling(type="self_extend", factor=2.5)


@pytest.mark.parametrize("L, window, S, C", [(16, None, 12, 10), (18, 8, 13, 5)])
def test_dual_chunk_places_queries_and_keys_as_chunkllama_indexes_them(L, window, S, C):
    """S = ⌊3L/4⌋, w = L/8 unless set, chunks of C = S − w. Key j at j mod C; query i at i mod C for keys of its
    chunk, min(i mod C + C, S) for the chunk before, min(2C − 1, S) farther back (HKUNLP/ChunkLlama's q_t, qc_t, k_t
    tables), each pair by hand: at L = 16, w = 2 that is min(19, 12) = 12; at L = 18 (3L/4 = 13.5), w = 8 it is
    min(9, 13) = 9."""
    q, k = qk(T=36)
    pos = torch.arange(36)
    r = rope_with(L=L, type="dual_chunk", **({"window": window} if window else {}))
    assert r.window == S - C and r.label().startswith("rope+dual_chunk")
    got = moved_logits(r, q, k, pos)
    for i in range(36):
        for j in range(i + 1):
            gap = i // C - j // C
            a = i % C if gap == 0 else (min(i % C + C, S) if gap == 1 else min(2 * C - 1, S))
            torch.testing.assert_close(got[0, :, i, j], logit_rope(r, q, k, i, j, a, j % C), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("L, type, global_tokens, window", [
    (9, "lm_infinite", 10, 9), (9, "streaming", 4, 5), (4, "streaming", 4, 1), (9, "self_extend", 4, 4),
    (2, "self_extend", 4, 1), (18, "dual_chunk", 4, 2), (8, "dual_chunk", 4, 1), (9, "rerope", 4, 9)])
def test_the_default_sinks_and_window_of_each_method(L, type, global_tokens, window):
    """LM-Infinite keeps 10 global tokens, the others 4 sinks; the window is ⌊L/2⌋ for Self-Extend's neighbours,
    L − n for StreamingLLM's recent keys, ⌊L/8⌋ for dual chunk attention (at least 1 each), L otherwise."""
    r = rope_with(L=L, type=type)
    assert (r.global_tokens, r.window) == (global_tokens, window)


def test_dual_chunk_refuses_a_window_that_leaves_no_chunk():
    """Chunks of C = ⌊3L/4⌋ − w tokens: at L = 16, w = 11 leaves chunks of 1, w = 12 none."""
    assert rope_with(L=16, type="dual_chunk", window=11).window == 11
    with pytest.raises(ValueError, match="scheme.scaling.window=12 leaves no chunk"):
        rope_with(L=16, type="dual_chunk", window=12)
