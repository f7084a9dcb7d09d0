"""RoPE (pe_bench/schemes/rope.py) against the published definitions, computed here independently in float64: the
rotation, p-RoPE/HoPE's position-free pairs, the context-extension frequencies and temperatures (HF
modeling_rope_utils; YaRN's official code, jquesnelle/yarn), the validation of the scaling options, and the module's
buffers."""

import cmath
import math

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.rope import (
    RoPE,
    RoPEOptions,
    RoPEScaling,
    apply_rotary,
    inv_freq,
    rope_angles,
    scaled_inv_freq,
    yarn_correction_range,
    yarn_mscale,
)


def thetas(d, b):
    return [b ** (-2 * k / d) for k in range(d // 2)]


def shape(head_dim=8, n_heads=2, train_seq_len=16, **kw):
    return ModelShape(d_model=head_dim * n_heads, n_heads=n_heads, head_dim=head_dim, train_seq_len=train_seq_len,
                      **kw)


def rope(head_dim=8, train_seq_len=16, scaling=None, **options):
    return RoPE(RoPEOptions(scaling=RoPEScaling(**(scaling or {})), **options),
                shape(head_dim, train_seq_len=train_seq_len))


def rotated_by_hand(x, angles_per_pair, attention=1.0):
    """Half layout (pairs (i, i + d/2)): each pair as a complex number times attention·e^{iφ}, float64."""
    x = x.double()
    half = len(angles_per_pair[0])
    out = x.clone()
    for t, row in enumerate(angles_per_pair):
        for i, phi in enumerate(row):
            z = complex(1, 0) * attention * cmath.exp(1j * phi)
            a, b = x[..., t, i], x[..., t, i + half]
            out[..., t, i] = a * z.real - b * z.imag
            out[..., t, i + half] = b * z.real + a * z.imag
    return out


# --- the rotation -----------------------------------------------------------------------------------------------


def test_rope_angles_are_products_taken_in_float64_even_for_half_precision_frequencies():
    """rope_angles' contract: p·θ_k computed in float64, returned as float32, whatever the frequencies' dtype (a
    module cast with .half() holds float16 θ): 1000·θ in float16 would be off by up to 0.5 rad."""
    positions = torch.arange(1000, 1012)
    freqs = inv_freq(8, 10000.0).half()
    got = rope_angles(positions, 8, 10000.0, freqs)
    expected = torch.tensor([[p * float(f) for f in freqs] for p in range(1000, 1012)], dtype=torch.float64).float()
    assert got.dtype == torch.float32
    assert torch.equal(got, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_apply_rotary_returns_the_dtype_it_was_given(dtype):
    """The rotation is computed in float32 but q and k keep their dtype (bf16 training, float64 checks)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 5, 8, generator=g).to(dtype)
    angles = rope_angles(torch.arange(5), 8, 10000.0)
    out = apply_rotary(x, angles, "half")
    assert out.dtype == dtype
    expected = rotated_by_hand(x, angles.double().tolist())
    torch.testing.assert_close(out.double(), expected, rtol=2e-2 if dtype != torch.float64 else 1e-6, atol=2e-2)


# --- which pairs rotate -----------------------------------------------------------------------------------------


def test_hope_keeps_only_p_ropes_pairs_that_also_complete_a_period():
    """p-RoPE keeps the first ⌊p·d/2⌋ pairs, HoPE those with θ_k·L >= 2π; both at once: the intersection."""
    d, b, L = 16, 10000.0, 4096
    r = RoPE(RoPEOptions(frequencies_kept=0.5, hope=True), shape(head_dim=d, train_seq_len=L))
    expected = [k < 4 and t * L >= 2 * math.pi for k, t in enumerate(thetas(d, b))]
    assert sum(t * L >= 2 * math.pi for t in thetas(d, b)) > sum(expected) == 4  # p-RoPE's cut binds here (HoPE: 6)
    assert r.rotating_pairs().tolist() == expected
    assert (r.theta[4:] == 0).all() and (r.theta[:4] > 0).all()


def test_hope_rotates_a_frequency_that_completes_exactly_one_period_within_the_training_length():
    """θ_k·L >= 2π: a pair turning exactly once over L rotates. base = (L/2π)², d = 4: θ_1·L = 2π in float64."""
    L = 8
    base = (L / (2 * math.pi)) ** 2
    assert inv_freq(4, base)[1].item() * L == 2 * math.pi  # the boundary case, exactly
    r = RoPE(RoPEOptions(base=base, hope=True), shape(head_dim=4, train_seq_len=L))
    assert r.rotating_pairs().tolist() == [True, True]


# --- the module -------------------------------------------------------------------------------------------------


def test_odd_head_dim_is_refused_naming_rope():
    with pytest.raises(ValueError, match=r"^rope rotates pairs of dimensions"):
        RoPE(RoPEOptions(), ModelShape(d_model=10, n_heads=2, head_dim=5, train_seq_len=16))


def test_a_rotary_fraction_that_rotates_nothing_is_refused():
    """⌊0.2·8⌋ = 1, rounded down to an even count: 0 dimensions rotate."""
    with pytest.raises(ValueError, match="rotates no dimension"):
        rope(head_dim=8, rotary_fraction=0.2)


@pytest.mark.parametrize("scaling", [{}, {"type": "linear", "factor": 2}, {"type": "yarn", "factor": 2}])
def test_a_single_rotating_pair_works_for_scalings_that_do_not_rescale_the_base(scaling):
    """rot_dim = 2 (rotary_fraction 0.25 of 8): only NTK and dynamic NTK need d > 2 (b·s^(d/(d−2)))."""
    r = rope(head_dim=8, rotary_fraction=0.25, scaling=scaling)
    assert r.rot_dim == 2
    q = torch.randn(1, 1, 4, 8, generator=torch.Generator().manual_seed(1))
    theta, attention = scaled_inv_freq(2, 10000.0, RoPEScaling(**scaling), 16, 16)
    qr, _ = r.rotate(q, q, torch.arange(4))
    expected_rot = rotated_by_hand(q[..., :2], [[p * float(theta[0])] for p in range(4)], attention)
    torch.testing.assert_close(qr[..., :2].double(), expected_rot, rtol=1e-5, atol=1e-6)
    assert torch.equal(qr[..., 2:], q[..., 2:])


@pytest.mark.parametrize("type_", ["ntk", "dynamic"])
def test_ntk_scalings_refuse_a_single_rotating_pair(type_):
    with pytest.raises(ValueError, match="needs a rotary dimension above 2"):
        rope(head_dim=8, rotary_fraction=0.25, scaling={"type": type_, "factor": 2})


def test_frequencies_are_not_saved_in_the_state_dict():
    """θ is recomputed from the options: a plain RoPE checkpoint loads into an eval-time YaRN model (strict) and the
    model keeps YaRN's frequencies."""
    plain, yarn = rope(head_dim=16), rope(head_dim=16, scaling={"type": "yarn", "factor": 8})
    assert "theta" not in plain.state_dict() and "theta" in dict(plain.named_buffers())
    yarn_theta = yarn.theta.clone()
    yarn.load_state_dict(plain.state_dict(), strict=True)
    assert torch.equal(yarn.theta, yarn_theta) and not torch.equal(yarn.theta, plain.theta)


def test_yarn_temperature_scales_k_as_well_as_q():
    """HF multiplies cos and sin of both q and k by attention_factor: q·k gains its square."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 6, 16, generator=g), torch.randn(1, 2, 6, 16, generator=g)
    r = rope(head_dim=16, scaling={"type": "yarn", "factor": 4})
    qr, kr = r.rotate(q, k, torch.arange(6))
    m = 0.1 * math.log(4) + 1
    torch.testing.assert_close(kr.norm(dim=-1), k.norm(dim=-1) * m)
    plain_q, plain_k = apply_rotary(q, rope_angles(torch.arange(6), 16, 1e4, r.theta), "half"), apply_rotary(
        k, rope_angles(torch.arange(6), 16, 1e4, r.theta), "half")
    torch.testing.assert_close(qr @ kr.transpose(-1, -2), (plain_q @ plain_k.transpose(-1, -2)) * m * m)


@pytest.mark.parametrize("length", [8, 40])
def test_longrope_uses_the_long_factors_past_the_original_length(length):
    """LongRoPE: θ_k/λ_k with long_factor when the current length ℓ > L, short_factor up to L, and the attention
    factor √(1 + ln s / ln L), applied to q and k."""
    long, short = [1.0, 1.7, 3.1, 6.3], [1.0, 1.1, 1.3, 1.9]
    r = rope(head_dim=8, train_seq_len=16, scaling={"type": "longrope", "factor": 4, "long_factor": long,
                                                     "short_factor": short})
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 1, length, 8, generator=g), torch.randn(1, 1, length, 8, generator=g)
    qr, kr = r.rotate(q, k, torch.arange(length))
    factors = long if length > 16 else short
    att = math.sqrt(1 + math.log(4) / math.log(16))
    angles = [[p * t / f for t, f in zip(thetas(8, 1e4), factors)] for p in range(length)]
    torch.testing.assert_close(qr.double(), rotated_by_hand(q, angles, att), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(kr.double(), rotated_by_hand(k, angles, att), rtol=1e-4, atol=1e-5)


# --- the scaled frequencies -------------------------------------------------------------------------------------

CONFIGS = [(32, 1e4, 64), (64, 1e4, 64), (128, 5e5, 8192), (64, 1e4, 512)]


@pytest.mark.parametrize("d,b,L", CONFIGS)
@pytest.mark.parametrize("type_", ["none", "rerope"])
def test_unscaled_types_give_ropes_frequencies_bit_for_bit(type_, d, b, L):
    """scaling none (and ReRoPE, which acts on the logits) leave a trained model's frequencies exactly as trained."""
    theta, attention = scaled_inv_freq(d, b, RoPEScaling(type=type_), L, 2 * L)
    assert torch.equal(theta, inv_freq(d, b)) and attention == 1.0
    assert theta.tolist() == pytest.approx(thetas(d, b), rel=1e-12)


def test_rerope_module_keeps_ropes_frequencies():
    d = 32
    r = RoPE(RoPEOptions(scaling=RoPEScaling(type="rerope", window=8)), shape(head_dim=d, train_seq_len=64))
    assert torch.equal(r.theta, inv_freq(d, 10000.0))


def longrope_attention(s, L):
    return math.sqrt(1 + math.log(s) / math.log(L)) if s > 1 else 1.0


@pytest.mark.parametrize("s,L", [(1.0, 1), (1.0, 512), (1.5, 512), (2.0, 4096), (16.0, 4096)])
def test_longrope_attention_factor_is_hfs_default(s, L):
    """√(1 + ln s / ln L) for s > 1, 1 otherwise (any L, even L = 1 where ln L = 0)."""
    sc = RoPEScaling(type="longrope", factor=s, long_factor=[1.0] * 4, short_factor=[1.0] * 4)
    _, attention = scaled_inv_freq(8, 1e4, sc, L, L)
    assert attention == pytest.approx(longrope_attention(s, L), rel=1e-15)


def test_longrope_attention_factor_given_is_used():
    sc = RoPEScaling(type="longrope", factor=8, long_factor=[1.0] * 4, short_factor=[1.0] * 4, attention_factor=1.3)
    assert scaled_inv_freq(8, 1e4, sc, 512, 4096)[1] == 1.3


def test_longrope_divides_by_the_factors_in_float64():
    """θ'_k = θ_k/λ_k exactly in float64, λ given as Python floats like 1.1 that float32 would round."""
    long = [1.1, 1.3, 2.7, 5.9]
    short = [1.01, 1.03, 1.07, 1.3]
    sc = RoPEScaling(type="longrope", factor=8, long_factor=long, short_factor=short)
    for ell, factors in ((4096, long), (256, short)):
        theta, _ = scaled_inv_freq(8, 1e4, sc, 512, ell)
        assert theta.dtype == torch.float64
        assert theta.tolist() == pytest.approx([t / f for t, f in zip(thetas(8, 1e4), factors)], rel=1e-14)


def yarn_range_by_hand(d, b, L, beta_fast, beta_slow):
    def dim(rot):
        return d * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(b))

    return max(math.floor(dim(beta_fast)), 0), min(math.ceil(dim(beta_slow)), d - 1)


@pytest.mark.parametrize("args", [(64, 1e4, 512, 32, 1), (64, 1e4, 64, 32, 1), (8, 10.0, 10000, 32, 1),
                                  (128, 5e5, 8192, 32, 1), (64, 1e4, 512, 128, 82)])
def test_yarn_correction_range_clamps_to_0_and_d_minus_1(args):
    """yarn's find_correction_range: ⌊dim(β)⌋ and ⌈dim(α)⌉ clamped to [0, d − 1]."""
    assert yarn_correction_range(*args) == yarn_range_by_hand(*args)


def test_yarn_correction_range_worked_clamps():
    assert yarn_correction_range(64, 1e4, 64, 32, 1) == (0, 9)  # the lower bound clamps at 0
    assert yarn_correction_range(8, 10.0, 10000, 32, 1) == (6, 7)  # the upper bound clamps at d − 1


def test_yarn_ramp_of_zero_width_widens_by_a_thousandth_as_in_the_official_code():
    """linear_ramp_mask(min, max): max += 0.001 when min == max. Here both bounds are 0 (β = 128, α = 82 at
    L = 512): dimension 0 keeps θ_0, every other dimension is interpolated, θ_k/s; nothing is NaN."""
    d, b, L, s = 64, 1e4, 512, 4.0
    assert yarn_correction_range(d, b, L, 128, 82) == (0, 0)
    sc = RoPEScaling(type="yarn", factor=s, beta_fast=128, beta_slow=82)
    theta, _ = scaled_inv_freq(d, b, sc, L, L)
    expected = []
    for k, t in enumerate(thetas(d, b)):
        ramp = min(max((k - 0) / 0.001, 0.0), 1.0)
        expected.append(t / s * ramp + t * (1 - ramp))
    assert theta.tolist() == pytest.approx(expected, rel=1e-12)


def test_yarn_attention_factor_given_replaces_the_default_temperature():
    sc = RoPEScaling(type="yarn", factor=8, attention_factor=1.5)
    assert scaled_inv_freq(64, 1e4, sc, 512, 512)[1] == 1.5
    assert scaled_inv_freq(64, 1e4, RoPEScaling(type="yarn", factor=8), 512, 512)[1] == pytest.approx(
        0.1 * math.log(8) + 1)


@pytest.mark.parametrize("s", [0.5, 1.0, 1.5, 2.0, 8.0])
def test_yarn_mscale_is_hfs_get_mscale(s):
    """HF get_mscale(scale, mscale=1): 1 for scale <= 1, else 0.1·mscale·ln(scale) + 1."""
    assert yarn_mscale(s) == pytest.approx(1.0 if s <= 1 else 0.1 * math.log(s) + 1, rel=1e-15)


def test_yarn_mscale_takes_deepseeks_mscale_multiplier():
    """DeepSeek-V2's variant: 0.1·m·ln s + 1 with m = mscale (REFERENCE: mscale(s, m))."""
    assert yarn_mscale(40, 0.707) == pytest.approx(0.1 * 0.707 * math.log(40) + 1, rel=1e-15)
    assert yarn_mscale(40, 1.0) / yarn_mscale(40, 0.707) == pytest.approx(
        (0.1 * math.log(40) + 1) / (0.1 * 0.707 * math.log(40) + 1))


def llama3_by_hand(d, b, L, s, lff, hff):
    out = []
    for t in thetas(d, b):
        wavelen = 2 * math.pi / t
        if wavelen < L / hff:
            out.append(t)
        elif wavelen > L / lff:
            out.append(t / s)
        else:
            mu = (L / wavelen - lff) / (hff - lff)
            out.append((1 - mu) * t / s + mu * t)
    return out


@pytest.mark.parametrize("lff,hff", [(2.0, 8.0), (0.5, 3.0), (1.0, 4.0)])
def test_llama3_frequencies_with_other_low_and_high_factors(lff, hff):
    theta, attention = scaled_inv_freq(64, 1e4, RoPEScaling(type="llama3", factor=8, low_freq_factor=lff,
                                                            high_freq_factor=hff), 2048, 2048)
    assert theta.tolist() == pytest.approx(llama3_by_hand(64, 1e4, 2048, 8, lff, hff), rel=1e-12)
    assert attention == 1.0


def test_llama3_wavelength_exactly_at_the_low_boundary_is_interpolated_once():
    """λ_16 = 2π·b^(2·16/64) = L/low_freq_factor exactly: HF's blend gives μ = 0, i.e. θ/s (continuous with the
    fully interpolated side); neither θ nor θ/s²."""
    d, b, L, s = 64, 1e4, 2048, 8.0
    wavelen = 2 * math.pi / inv_freq(d, b)[16].item()
    lff = L / wavelen
    assert L / lff == wavelen  # the boundary, exactly
    theta, _ = scaled_inv_freq(d, b, RoPEScaling(type="llama3", factor=s, low_freq_factor=lff,
                                                 high_freq_factor=16.0), L, L)
    assert theta[16].item() == pytest.approx(thetas(d, b)[16] / s, rel=1e-12)
    assert theta.tolist() == pytest.approx(llama3_by_hand(d, b, L, s, lff, 16.0), rel=1e-12)


# --- option validation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("type_,field,value,readers", [
    ("linear", "window", 5, "rerope|self_extend|lm_infinite|streaming|dual_chunk"),
    ("yarn", "global_tokens", 4, "lm_infinite|streaming"),
    ("none", "beta_fast", 16.0, "yarn"),
    ("yarn", "low_freq_factor", 2.0, "llama3"),
    ("none", "factor", 2.0, "linear|ntk|dynamic|yarn|llama3|longrope|self_extend"),
])
def test_an_option_the_type_does_not_read_is_refused_naming_the_types_that_read_it(type_, field, value, readers):
    kw = {"factor": 2.0} if type_ in ("linear", "yarn") else {}
    with pytest.raises(ValueError) as err:
        RoPEScaling(type=type_, **kw, **{field: value})
    assert str(err.value).endswith(f"use scheme.scaling.type={readers}")


def test_llama3_high_freq_factor_equal_to_the_low_one_is_refused():
    """μ divides by high_ff − low_ff: equal factors would divide by zero."""
    with pytest.raises(ValueError, match="high_freq_factor=2 must exceed"):
        RoPEScaling(type="llama3", factor=8, low_freq_factor=2.0, high_freq_factor=2.0)


def test_yarn_beta_fast_equal_to_beta_slow_is_refused():
    with pytest.raises(ValueError, match=r"beta_fast=4 must exceed .*beta_slow=4"):
        RoPEScaling(type="yarn", factor=8, beta_fast=4.0, beta_slow=4.0)


@pytest.mark.parametrize("given", [{"long_factor": [1.0] * 4}, {"short_factor": [1.0] * 4}])
def test_longrope_needs_both_factor_lists(given):
    with pytest.raises(ValueError, match="needs scheme.scaling.long_factor and scheme.scaling.short_factor"):
        RoPEScaling(type="longrope", factor=8, **given)
