"""ALiBi's fixed slopes stay out of checkpoints; KERPLE (Chi et al. 2022, §4.2) initialises r1, r2 as the official
gpt-neox code and keeps them per layer, or shared by all layers."""

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.alibi import ALiBi, ALiBiOptions
from pe_bench.schemes.kerple import KerpleLog, KerpleOptions, KerplePower


def test_alibi_fixed_slopes_are_a_buffer_left_out_of_the_state_dict():
    """The slopes are a function of the head count: a checkpoint holds no ALiBi state (and loads without one)."""
    shape = ModelShape(d_model=16, n_heads=4, head_dim=4, train_seq_len=8)
    alibi = ALiBi(ALiBiOptions(), shape)
    assert "slopes" in dict(alibi.named_buffers())
    assert alibi.state_dict() == {}
    alibi.load_state_dict({})
    assert ALiBi(ALiBiOptions(learned_slopes=True), shape).state_dict().keys() == {"log_slopes"}


@pytest.mark.parametrize("cls,r1_high,r2_high", [(KerpleLog, 2.0, 1.0), (KerplePower, 1.0, 2.0)])
def test_kerple_initialises_r1_and_r2_uniformly_as_the_official_code(cls, r1_high, r2_high):
    """r1 ~ U(0, 2), r2 ~ U(0, 1) for the log kernel; r1 ~ U(0, 1), r2 ~ U(0, 2) for the power kernel (§4.2 code).
    256 draws each: the top quarter of the interval is hit with probability 1 − 0.75^256."""
    torch.manual_seed(0)
    k = cls(KerpleOptions(), ModelShape(d_model=256, n_heads=64, head_dim=4, train_seq_len=8, n_layers=4))
    for p, high in [(k.r1, r1_high), (k.r2, r2_high)]:
        assert p.shape == (4, 64)
        assert (p >= 0).all() and (p < high).all()
        assert p.max() > 0.75 * high and p.min() < 0.25 * high
        assert p.mean().item() == pytest.approx(high / 2, rel=0.1)


@pytest.mark.parametrize("cls", [KerpleLog, KerplePower])
def test_kerple_shared_across_layers_has_one_set_of_parameters_and_one_bias(cls):
    torch.manual_seed(0)
    shape = ModelShape(d_model=16, n_heads=4, head_dim=4, train_seq_len=8, n_layers=3)
    k = cls(KerpleOptions(per_layer=False), shape)
    assert k.r1.shape == (1, 4) and k.r2.shape == (1, 4)
    assert sum(p.numel() for p in k.parameters()) == 8
    pos = torch.arange(10)
    first = k.score_bias(pos, pos, 0)
    for layer in (1, 2):
        torch.testing.assert_close(k.score_bias(pos, pos, layer), first, rtol=0, atol=0)


@pytest.mark.parametrize("cls", [KerpleLog, KerplePower])
def test_kerple_per_layer_biases_differ_and_the_default_layer_is_the_first(cls):
    torch.manual_seed(0)
    shape = ModelShape(d_model=16, n_heads=4, head_dim=4, train_seq_len=8, n_layers=2)
    k = cls(KerpleOptions(), shape)
    assert k.r1.shape == (2, 4)
    pos = torch.arange(10)
    torch.testing.assert_close(k.score_bias(pos, pos), k.score_bias(pos, pos, 0), rtol=0, atol=0)
    assert not torch.allclose(k.score_bias(pos, pos, 0), k.score_bias(pos, pos, 1))
