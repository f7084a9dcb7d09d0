"""``inherit``: a fine-tune adapts its parent's scheme weights (the model state under ``scheme.``) to its own shapes
before loading them (pe_bench.train.load_parent). A composite hands each part the keys under its own prefix
(``scheme.parts.<i>.``) and the policy; DAPE hands its base bias ``scheme.base.``. Checked against the parts adapted
on their own, then loaded into the child as load_parent does."""

from __future__ import annotations

import pytest
import torch

from pe_bench import schemes


def shape(seq_len: int) -> schemes.ModelShape:
    return schemes.ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=seq_len, n_layers=2)


def build(name: str, seq_len: int, seed: int, **options):
    torch.manual_seed(seed)
    cls = schemes.get(name)
    return cls(cls.Options(**options), shape(seq_len))


def model_state(scheme) -> dict[str, torch.Tensor]:
    """The scheme's weights as they lie in a model checkpoint (under ``scheme.``)."""
    return {f"scheme.{k}": v.clone() for k, v in scheme.state_dict().items()}


@pytest.mark.parametrize("how", ["extend", "interpolate"])
def test_a_hybrid_hands_each_part_its_own_weights_to_adapt(how):
    """hybrid [alibi, learned, learned] at L = 8 fine-tuned at L = 16: each learned table (parts 1 and 2) grows
    exactly as that learned scheme on its own grows it, by the policy given; nothing else changes."""
    parts = [{"name": "alibi"}, {"name": "learned"}, {"name": "learned", "extend_seed": 7}]
    parent = build("hybrid", 8, seed=0, parts=parts)
    child = build("hybrid", 16, seed=1, parts=parts)
    state = model_state(parent)
    child.inherit(state, "scheme.", how)

    for i in (1, 2):
        alone_state = {"x.table": parent.parts[i].table.detach().clone()}
        child.parts[i].inherit(alone_state, "x.", how)  # the part on its own, under a prefix of its own
        assert alone_state["x.table"].shape == (16, 16)
        assert torch.equal(state[f"scheme.parts.{i}.table"], alone_state["x.table"])
        assert torch.equal(state[f"scheme.parts.{i}.table"][:1], parent.parts[i].table.detach()[:1])
    assert not torch.equal(state["scheme.parts.1.table"], state["scheme.parts.2.table"])
    assert set(state) == set(model_state(parent))
    # the adapted weights load into the child as they are (load_parent's next step)
    child.load_state_dict({k.removeprefix("scheme."): v for k, v in state.items()})
    assert torch.equal(child.parts[1].table.detach(), state["scheme.parts.1.table"])


def test_the_two_policies_differ_for_a_hybrids_learned_part():
    parts = [{"name": "alibi"}, {"name": "learned"}]
    parent = build("hybrid", 8, seed=0, parts=parts)
    child = build("hybrid", 16, seed=1, parts=parts)
    extended, interpolated = model_state(parent), model_state(parent)
    child.inherit(extended, "scheme.", "extend")
    child.inherit(interpolated, "scheme.", "interpolate")
    old = parent.parts[1].table.detach()
    # extend keeps the parent's rows in place; interpolation puts old row m at new row 2m (s = 2)
    assert torch.equal(extended["scheme.parts.1.table"][:8], old)
    assert torch.equal(interpolated["scheme.parts.1.table"][::2], old)
    assert not torch.equal(extended["scheme.parts.1.table"], interpolated["scheme.parts.1.table"])


@pytest.mark.parametrize("base", ["alibi", "kerple_log", "fire", "t5"])
def test_dape_passes_its_weights_through_a_fine_tune_unchanged(base):
    """Nothing of DAPE (its MLPs, its base bias) is sized by the length: inherit leaves the parent's weights as
    they are, and they load into the child."""
    parent = build("dape", 8, seed=0, base=base)
    child = build("dape", 16, seed=1, base=base)
    state = model_state(parent)
    for how in ("extend", "interpolate"):
        child.inherit(state, "scheme.", how)
        reference = model_state(parent)
        assert set(state) == set(reference)
        assert all(torch.equal(state[k], reference[k]) for k in reference)
    child.load_state_dict({k.removeprefix("scheme."): v for k, v in state.items()})
    assert all(torch.equal(a, b) for a, b in zip(child.state_dict().values(), parent.state_dict().values()))
