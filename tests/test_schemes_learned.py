"""Learned absolute positions inherited by a fine-tune at a longer length (``Learned.inherit``, called by
``train.load_parent`` with the prefix "scheme." and ``finetune.new_positions``): ``interpolate`` is position
interpolation (Chen et al. 2023) — row m of the new table is the parent's table at m·L/L', linearly interpolated."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from pe_bench.schemes import ModelShape
from pe_bench.schemes.learned import Learned, LearnedOptions


def _learned(rows: int, d: int) -> Learned:
    torch.manual_seed(0)
    return Learned(LearnedOptions(), ModelShape(d_model=d, n_heads=1, head_dim=d, train_seq_len=rows))


def _parent_table(rows: int, d: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(rows * 100 + d)
    return torch.randn(rows, d, generator=g, dtype=torch.float64).to(dtype)


def _interpolated_by_hand(old: torch.Tensor, rows: int) -> torch.Tensor:
    """Row m = old at x = m·L/L' (exact rational), (1 − w)·old[⌊x⌋] + w·old[⌊x⌋ + 1], w = x − ⌊x⌋; past the parent's
    last row (x > L − 1) that last row, as position interpolation clamps there."""
    L = old.shape[0]
    table = old.double()
    out = []
    for m in range(rows):
        x = Fraction(m * L, rows)
        lo = math.floor(x)
        w = float(x - lo)
        out.append(table[lo] if w == 0 else (1 - w) * table[lo] + w * table[min(lo + 1, L - 1)])
    return torch.stack(out)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("old_rows, rows, d", [
    (2, 4, 2),  # s = 2
    (2, 4, 8),  # wider than the new table is long
    (2, 4, 4),  # as wide as the new table is long
    (3, 7, 2),  # narrower than the parent table is long, s = 7/3
    (5, 12, 3),
    (4, 5, 6),
])
def test_interpolate_row_m_is_the_parent_table_at_m_L_over_L_prime(old_rows, rows, d, dtype):
    new = _learned(rows, d)
    old = _parent_table(old_rows, d, dtype)
    state = {"scheme.table": old.clone(), "other": torch.ones(1)}
    new.inherit(state, "scheme.", "interpolate")
    got = state["scheme.table"]
    assert got.shape == (rows, d) == new.table.shape and got.dtype == dtype
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(got.double(), _interpolated_by_hand(old, rows), atol=tol, rtol=0)
    for m in range(rows):  # the rows at a parent position are the parent's rows, exactly
        if (m * old_rows) % rows == 0:
            assert torch.equal(got[m], old[m * old_rows // rows])
    assert torch.equal(state["other"], torch.ones(1))
    new.load_state_dict({"table": got.to(new.table.dtype)})  # it fits the fine-tune's table


@pytest.mark.parametrize("how", ["interpolate", "extend"])
def test_inherit_an_integer_scale_lands_the_parents_rows_on_every_s_th_row(how):
    """s = 3: the parent's row k lands exactly at row 3k (interpolate) or row k (extend); the rows between are the
    1/3, 2/3 mixes of its neighbours, and past the parent's last row its last row (the clamp)."""
    new = _learned(12, 4)
    old = _parent_table(4, 4, torch.float32)
    state = {"scheme.table": old.clone()}
    new.inherit(state, "scheme.", how)
    got = state["scheme.table"]
    if how == "extend":
        assert torch.equal(got[:4], old) and torch.equal(got[4:], new._untrained_rows(8, old))
        return
    for k in range(4):
        assert torch.equal(got[3 * k], old[k])
    torch.testing.assert_close(got[4], old[1] * (2 / 3) + old[2] / 3)
    torch.testing.assert_close(got[8], old[2] / 3 + old[3] * (2 / 3))
    torch.testing.assert_close(got[10], old[3])
    torch.testing.assert_close(got[11], old[3])


@pytest.mark.parametrize("how", ["interpolate", "extend"])
def test_inherit_leaves_a_same_length_table_or_a_state_without_one_alone(how):
    new = _learned(6, 4)
    old = _parent_table(6, 4, torch.float32)
    state = {"scheme.table": old}
    new.inherit(state, "scheme.", how)
    assert state["scheme.table"] is old
    state = {"scheme.something_else": old}
    new.inherit(state, "scheme.", how)
    assert list(state) == ["scheme.something_else"] and state["scheme.something_else"] is old
    state = {"table": old[:3]}  # another prefix: not this scheme's table
    new.inherit(state, "scheme.", how)
    assert state["table"].shape == (3, 4)


@pytest.mark.parametrize("how", ["interpolate", "extend"])
def test_inherit_refuses_a_parent_table_longer_than_the_new_one(how):
    new = _learned(4, 2)
    state = {"scheme.table": _parent_table(6, 2, torch.float32)}
    with pytest.raises(ValueError, match="6 rows, more than this run's 4"):
        new.inherit(state, "scheme.", how)
