"""T5 relative position bias (Raffel et al. 2020, §2.1): causal buckets against the official formula
(mesh-tensorflow ``_relative_position_bucket``, bidirectional=False), the options' check, and the scheme's scale."""

import math

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.t5 import T5Bias, T5Options, t5_bucket

SHAPE = ModelShape(d_model=32, n_heads=2, head_dim=16, train_seq_len=16)


def official_bucket(n, num_buckets=32, max_distance=128):
    """Exact buckets below num_buckets // 2, then logarithmic up to max_distance, capped at num_buckets − 1."""
    n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return min(large, num_buckets - 1)


def test_t5_bucket_defaults_are_32_buckets_up_to_distance_128():
    """Distance 113 is the first in bucket 31 with max_distance 128 (16·8^(15/16) = 112.2)."""
    distance = torch.arange(-3, 300)
    got = t5_bucket(distance)
    assert got.tolist() == [official_bucket(n) for n in distance.tolist()]
    assert t5_bucket(torch.tensor([112, 113])).tolist() == [30, 31]


@pytest.mark.parametrize("num_buckets,max_distance", [(3, 4), (3, 2), (2, 5), (8, 40), (33, 200)])
def test_t5_bucket_matches_the_official_formula_for_other_sizes(num_buckets, max_distance):
    """With num_buckets = 3 the first logarithmic bucket starts at distance 1 (ln(1/1) = 0: bucket 1)."""
    distance = torch.arange(0, 400)
    got = t5_bucket(distance, num_buckets, max_distance)
    assert got.tolist() == [official_bucket(n, num_buckets, max_distance) for n in distance.tolist()]


def test_t5_options_refuse_a_max_distance_within_the_exact_buckets():
    with pytest.raises(ValueError, match="must exceed scheme.num_buckets // 2 = 16"):
        T5Options(num_buckets=32, max_distance=16)
    with pytest.raises(ValueError, match="must exceed scheme.num_buckets // 2 = 4"):
        T5Options(num_buckets=9, max_distance=4)
    assert T5Options(num_buckets=32, max_distance=17).max_distance == 17


def t5_with_table(options):
    t5 = T5Bias(options, SHAPE)
    with torch.no_grad():
        t5.table.copy_(torch.arange(2 * options.num_buckets, dtype=torch.float32).view(2, -1))
    return t5


def test_t5_bias_is_the_scaled_table_entry_of_each_pairs_bucket():
    pos = torch.arange(0, 90)
    for options, scale in [(T5Options(), 4.0), (T5Options(num_buckets=16, max_distance=40, scale=1.5), 1.5)]:
        t5 = t5_with_table(options)
        bias = t5.score_bias(pos, pos)
        assert bias.shape == (2, 90, 90)
        for i, j in [(0, 0), (50, 40), (70, 10), (89, 0), (89, 70)]:
            b = official_bucket(i - j, options.num_buckets, options.max_distance)
            assert bias[:, i, j].tolist() == [scale * b, scale * (b + options.num_buckets)]


def test_t5_keeps_the_model_shape_it_was_built_for():
    assert T5Bias(T5Options(), SHAPE).shape == SHAPE
