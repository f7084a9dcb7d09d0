"""Shaw et al. 2018's value vectors (eq. 3: z_i = Σ_j α_ij (v_j + a^V_clip(i−j))) in the attention weights' dtype,
and the per-layer pattern of scheme=layered: its hooks default to layer 0 like every scheme's, and its pattern may
only name the parts it has."""

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.layered import Layered, LayeredOptions
from pe_bench.schemes.shaw import Shaw, ShawOptions


def shape(n_layers=2):
    return ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=16, n_layers=n_layers)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_shaw_value_terms_follow_the_attention_weights_dtype(dtype):
    """Σ_j α_ij a^V_clip(i−j, k), by hand in float64, for weights in float64 or bf16 from a float32 module."""
    torch.manual_seed(0)
    K, T = 3, 7
    s = Shaw(ShawOptions(max_distance=K), shape())
    g = torch.Generator().manual_seed(1)
    probs = torch.tril(torch.rand(2, 2, T, T, generator=g, dtype=torch.float64))
    probs = (probs / probs.sum(-1, keepdim=True)).to(dtype)
    pos = torch.arange(T)
    got = s.value_terms(probs, pos, pos, 1)
    assert got.dtype == dtype
    table = s.value_table[1].detach().double()
    expected = torch.zeros(2, 2, T, 8, dtype=torch.float64)
    for i in range(T):
        for j in range(i + 1):
            expected[:, :, i] += probs[:, :, i, j, None].double() * table[min(i - j, K)]
    tol = 1e-12 if dtype == torch.float64 else 2e-2
    torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol)


def test_layered_score_bias_defaults_to_layer_0_like_the_base_hook():
    """Scheme.score_bias(q_pos, k_pos, layer=0): called without a layer, layered answers for layer 0 (ALiBi here),
    not for another layer's part (NoPE: no bias)."""
    s = Layered(LayeredOptions(parts=[{"name": "alibi"}, {"name": "nope"}], pattern=[0, 1]), shape())
    pos = torch.arange(5)
    default = s.score_bias(pos, pos)
    assert default is not None
    torch.testing.assert_close(default, s.parts[0].score_bias(pos, pos, 0))
    assert s.score_bias(pos, pos, 1) is None


def test_layered_rotate_defaults_to_layer_0_like_the_base_hook():
    """Called without a layer, layered rotates as layer 0's part (RoPE here), not as another layer's (NoPE)."""
    s = Layered(LayeredOptions(parts=[{"name": "rope"}, {"name": "nope"}], pattern=[0, 1]), shape())
    torch.manual_seed(0)
    q, k, pos = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.arange(5)
    for got, want in zip(s.rotate(q, k, pos), s.parts[0].rotate(q, k, pos, 0)):
        torch.testing.assert_close(got, want)
    assert not torch.equal(s.rotate(q, k, pos)[0], q)


def test_layered_pattern_index_equal_to_the_number_of_parts_is_refused():
    """Indices run 0..len(parts) − 1: pattern index 2 with two parts is an error when the options are made."""
    with pytest.raises(ValueError, match=r"scheme.pattern has 2, but scheme.parts has 2 schemes \(indices 0..1\)"):
        LayeredOptions(parts=[{"name": "rope"}, {"name": "nope"}], pattern=[0, 1, 2])


def test_layered_local_part_index_equal_to_the_number_of_parts_is_refused():
    LayeredOptions(parts=[{"name": "rope"}, {"name": "nope"}], local_parts=[1], window=4)  # the last index: fine
    with pytest.raises(ValueError, match=r"scheme.local_parts has 2, but scheme.parts has 2 schemes"):
        LayeredOptions(parts=[{"name": "rope"}, {"name": "nope"}], local_parts=[2], window=4)


def test_a_local_layer_adds_its_window_to_its_parts_bias_and_only_chunks_are_not_relative():
    """Sliding windows keep a relative scheme relative (the mask is a function of i − j); fixed chunks do not. A local
    layer whose part has a bias (ALiBi) keeps it inside the window and −∞ outside."""
    parts = [{"name": "alibi"}, {"name": "nope"}]
    sliding = Layered(LayeredOptions(parts=parts, pattern=[0, 1], window=2), shape())
    chunked = Layered(LayeredOptions(parts=parts, pattern=[0, 1], window=2, chunked=True), shape())
    assert sliding.relative and not chunked.relative
    assert sliding.flex_problem() == "its local attention windows have no score_mod"
    pos = torch.arange(5)
    got, alibi = sliding.score_bias(pos, pos, 0), sliding.parts[0].score_bias(pos, pos, 0)
    outside = (pos[:, None] - pos[None, :]) >= 2
    assert torch.isneginf(got[:, outside]).all()
    torch.testing.assert_close(got[:, ~outside], alibi[:, ~outside])
    assert sliding.score_bias(pos, pos, 1) is None  # the global layer's part has no bias
