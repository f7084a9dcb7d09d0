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
