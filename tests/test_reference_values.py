"""Reference values from the papers' formulas (../shared/REFERENCE.md §A)."""


import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.alibi import ALiBi, ALiBiOptions, alibi_slopes
from pe_bench.schemes.base import LengthNotSupported
from pe_bench.schemes.learned import Learned, LearnedOptions
from pe_bench.schemes.rope import RoPE, RoPEOptions, apply_rotary, rope_angles
from pe_bench.schemes.sinusoidal import sinusoid_table
from pe_bench.schemes.t5 import t5_bucket


def test_sinusoid_at_position_3_with_d8():
    pe = sinusoid_table(torch.arange(5), 8)[3]
    # PE(3, 2k) = sin(3 / 10000^(2k/8)), PE(3, 2k+1) = cos(...): angles 3, 0.3, 0.03, 0.003
    expected = [0.1411200, -0.9899925, 0.2955202, 0.9553365, 0.0299955, 0.9995500, 0.0030000, 0.9999955]
    torch.testing.assert_close(pe, torch.tensor(expected), rtol=0, atol=1e-6)


@pytest.mark.parametrize("heads,expected", [
    (4, [1 / 4, 1 / 16, 1 / 64, 1 / 256]),
    (8, [2.0 ** -(i + 1) for i in range(8)]),
    (16, [2.0 ** (-0.5 * (i + 1)) for i in range(16)]),
    (6, [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]),
    (12, [2.0 ** -(i + 1) for i in range(8)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]),
])
def test_alibi_slopes_match_paper(heads, expected):
    assert alibi_slopes(heads) == pytest.approx(expected, rel=1e-12)


def test_alibi_bias_is_minus_slope_times_distance():
    shape = ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=8)
    bias = ALiBi(ALiBiOptions(), shape).score_bias(torch.arange(6), torch.arange(6))
    assert bias.shape == (4, 6, 6)
    assert bias[0, 5, 1].item() == pytest.approx(-4 / 4)  # head 1: m = 1/4, distance 4
    assert bias[3, 5, 5].item() == 0.0
    assert bias[3, 5, 0].item() == pytest.approx(-5 / 256)


def test_alibi_on_a_subset_of_heads_uses_the_slopes_for_that_many_heads():
    shape = ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=8)
    bias = ALiBi(ALiBiOptions(heads=2), shape).score_bias(torch.arange(6), torch.arange(6))
    assert bias[:, 5, 1].tolist() == pytest.approx([-4 / 16, -4 / 256, 0.0, 0.0])  # slopes(2) = 1/16, 1/256
    with pytest.raises(ValueError, match="exceeds model.n_heads"):
        ALiBi(ALiBiOptions(heads=5), shape)


def test_alibi_learned_slopes_start_at_the_paper_slopes_and_train():
    shape = ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=8)
    alibi = ALiBi(ALiBiOptions(learned_slopes=True), shape)
    assert alibi.head_slopes().tolist() == pytest.approx([1 / 4, 1 / 16, 1 / 64, 1 / 256], rel=1e-6)
    alibi.score_bias(torch.arange(6), torch.arange(6)).tril().sum().backward()  # the causal entries
    assert alibi.log_slopes.grad is not None and (alibi.log_slopes.grad != 0).all()
    assert ALiBi(ALiBiOptions(learned_slopes=True), shape).label() == "alibi[learned_slopes=True]"


@pytest.mark.parametrize("distance,bucket", [(0, 0), (1, 1), (15, 15), (16, 16), (20, 17), (32, 21), (64, 26),
                                             (100, 30), (127, 31), (128, 31), (1000, 31), (-5, 0)])
def test_t5_causal_buckets(distance, bucket):
    assert t5_bucket(torch.tensor([distance])).item() == bucket


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_preserves_norms_and_depends_only_on_offset(layout, fraction):
    rope = RoPE(RoPEOptions(layout=layout, rotary_fraction=fraction),
                ModelShape(d_model=64, n_heads=2, head_dim=32, train_seq_len=16))
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 32, generator=g), torch.randn(1, 1, 1, 32, generator=g)

    def dot(m, n):
        qm, _ = rope.rotate(q, q, torch.tensor([m]))
        kn, _ = rope.rotate(k, k, torch.tensor([n]))
        return (qm * kn).sum().item()

    qr, _ = rope.rotate(q, q, torch.tensor([1000]))
    assert qr.norm().item() == pytest.approx(q.norm().item(), rel=1e-5)
    assert dot(7, 3) == pytest.approx(dot(104, 100), abs=1e-4)
    assert dot(7, 3) != pytest.approx(dot(7, 4), abs=1e-3)
    if fraction < 1:  # partial rotary leaves the other dims alone
        torch.testing.assert_close(qr[..., 16:], q[..., 16:])


def test_rope_layouts_are_the_same_rotation_up_to_a_permutation():
    angles = rope_angles(torch.arange(5), 8, 10000.0)
    x = torch.randn(1, 1, 5, 8)
    half_order = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # interleaved pair (2i, 2i+1) = half pair (i, i+4)
    inter = apply_rotary(x[..., half_order], angles, "interleaved")
    half = apply_rotary(x, angles, "half")
    torch.testing.assert_close(inter, half[..., half_order])


def test_rope_angles_are_position_times_inverse_frequency():
    a = rope_angles(torch.tensor([3]), 8, 10000.0)[0]
    torch.testing.assert_close(a, torch.tensor([3.0, 0.3, 0.03, 0.003]))


def test_learned_table_policies_past_its_length():
    shape = ModelShape(d_model=4, n_heads=1, head_dim=4, train_seq_len=8)
    x = torch.zeros(1, 12, 4)
    with pytest.raises(LengthNotSupported, match="beyond_table=clamp or extend"):
        Learned(LearnedOptions(), shape).embed(x, torch.arange(12))
    clamp = Learned(LearnedOptions(beyond_table="clamp"), shape)
    out = clamp.embed(x, torch.arange(12))
    torch.testing.assert_close(out[0, 8:], clamp.table[7].expand(4, 4))
    ext = Learned(LearnedOptions(beyond_table="extend"), shape)
    a, b = ext.embed(x, torch.arange(12)), ext.embed(x, torch.arange(12))
    torch.testing.assert_close(a, b)  # the untrained rows are deterministic
    torch.testing.assert_close(a[0, :8], ext.table)
    assert not torch.allclose(a[0, 8:], ext.table[7].expand(4, 4))
    assert abs(a[0, 8:].std().item() - 0.02) < 0.015
    with pytest.raises(ValueError, match="beyond_table must be one of"):
        LearnedOptions(beyond_table="wrap")


def test_learned_table_starts_at_init_std():
    torch.manual_seed(0)
    table = Learned(LearnedOptions(init_std=0.05), ModelShape(d_model=64, n_heads=1, head_dim=64,
                                                              train_seq_len=64)).table
    assert table.shape == (64, 64)  # one row per position seen in training
    assert table.std().item() == pytest.approx(0.05, rel=0.05) and abs(table.mean().item()) < 0.005


@pytest.mark.parametrize("length", [9, 16])
def test_learned_extend_at_length_l_is_the_table_a_fine_tune_to_l_extends_to(length):
    """beyond_table=extend evaluated at L' (from the first position past the table, L' = L + 1, on) sees the L
    trained rows followed by exactly the untrained rows that a fine-tune to L' appends with how=extend."""
    # d = 6: torch's normal draws of n·6 numbers are not a prefix of those of (n + 1)·6, so the count of rows shows
    shape = ModelShape(d_model=6, n_heads=1, head_dim=6, train_seq_len=8)
    parent = Learned(LearnedOptions(beyond_table="extend"), shape)
    out = parent.embed(torch.zeros(1, length, 6), torch.arange(length))[0]
    child = Learned(LearnedOptions(), ModelShape(d_model=6, n_heads=1, head_dim=6, train_seq_len=length))
    state = {"table": parent.table.detach()}
    child.inherit(state, "", "extend")
    assert state["table"].shape == (length, 6)
    torch.testing.assert_close(out, state["table"], rtol=0, atol=0)
