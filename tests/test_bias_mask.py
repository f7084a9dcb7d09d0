"""The bias mask outside autograd: masked in place and reused across forward passes, never stale."""

from __future__ import annotations

import pytest
import torch

from pe_bench import schemes
from pe_bench.model.attention import causal_bias_mask
from pe_bench.build import build_model
from pe_bench.config import compose

BIAS_SCHEMES = [n for n in schemes.available() if n in ("alibi", "t5", "sandwich", "hybrid", "kerple_log", "fire")]


def _model(name: str, *more: str):
    cfg = compose([f"scheme={name}", "model.n_layers=2", "model.d_model=32", "model.n_heads=2", "train.seq_len=16",
                   *more])
    torch.manual_seed(0)
    return build_model(cfg, 256)


@pytest.mark.parametrize("name", BIAS_SCHEMES)
def test_a_reused_mask_gives_the_logits_of_a_fresh_one(name):
    model = _model(name).eval()
    fresh = _model(name).eval()
    x = torch.randint(0, 256, (2, 48))
    with torch.inference_mode():
        first, again = model(x), model(x)
        model._mask_cache = None
        assert torch.equal(first, again) and torch.equal(again, model(x)) and torch.equal(first, fresh(x))


# The trainer's optimizer is the fused AdamW, which updates parameters in place without bumping their version
# counters (torch 2.13): a cache keyed by tensor versions kept T5's first validation mask for the whole run.
OPTIMIZERS = {"sgd": lambda ps: torch.optim.SGD(ps, lr=1.0),
              "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=0.1, fused=True),
              "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=0.1, foreach=True)}


def _before_and_after_a_step(model, x: torch.Tensor, optimizer: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits outside autograd, then one step of ``optimizer`` on the scheme's parameters, then again."""
    with torch.no_grad():
        before = model(x)
    opt = OPTIMIZERS[optimizer](list(model.scheme.parameters()))
    model(x).float().pow(2).mean().backward()
    opt.step()
    with torch.no_grad():
        return before, model(x)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("name, extra", [("t5", ()), ("alibi", ("scheme.learned_slopes=true",))])
def test_the_mask_is_rebuilt_when_the_scheme_changes(name, extra, optimizer):
    """An optimizer step (or a loaded state) between two evaluations changes the bias: the kept mask is not used."""
    model = _model(name, *extra)
    x = torch.randint(0, 256, (1, 32))
    before, after = _before_and_after_a_step(model, x, optimizer)
    with torch.no_grad():
        model._mask_cache = None
        assert torch.equal(after, model(x)) and not torch.equal(before, after)
        other = _model(name, *extra)
        other.load_state_dict(model.state_dict())
        other(x)  # its own cache, then a state loaded into it
        other.load_state_dict(_model(name, *extra).state_dict())
        other_cache_free = _model(name, *extra)
        assert torch.equal(other(x), other_cache_free(x))


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_transformer_xl_keeps_no_table_across_an_optimizer_step(optimizer):
    """XL keeps its projected distance table outside autograd; with one layer the same table would be asked for
    again after a step: it must be rebuilt from the new W_R."""
    model = _model("xl", "model.n_layers=1").eval()
    x = torch.randint(0, 256, (1, 32))
    before, after = _before_and_after_a_step(model, x, optimizer)
    with torch.no_grad():
        model.scheme._kept = None
        assert torch.equal(after, model(x)) and not torch.equal(before, after)


def test_masking_in_place_only_outside_autograd():
    q = torch.arange(4)
    bias = torch.zeros(1, 4, 4, requires_grad=True)
    masked = causal_bias_mask(bias * 1, q, q)
    assert masked.requires_grad and torch.isinf(masked[0, 0, 0, 1])
    plain = torch.zeros(1, 4, 4)
    out = causal_bias_mask(plain, q, q)
    assert out.data_ptr() == plain.data_ptr() and torch.isinf(plain[0, 0, 1])  # in place: one tensor, not two
    view = torch.zeros(4, 4).expand(1, 4, 4)
    assert causal_bias_mask(view, q, q).data_ptr() != view.data_ptr()  # a view is never written through


@pytest.mark.parametrize("name", [n for n in schemes.available()])
def test_attention_by_blocks_of_query_rows_equals_the_whole_mask(name, monkeypatch):
    """Outside autograd at long lengths the bias is built a block of query rows at a time (BiasRows): the logits are
    those of the whole mask (fp32, 1e-5), for every scheme (those without a bias are untouched)."""
    from pe_bench.model import attention

    model = _model(name, *(["scheme.beyond_table=clamp"] if name == "learned" else [])).eval()
    x = torch.randint(0, 256, (2, 70))
    with torch.inference_mode():
        monkeypatch.setattr(attention, "MASK_BUDGET", 2**40)  # the whole mask
        whole = model(x)
        monkeypatch.setattr(attention, "MASK_BUDGET", 2 * 70 * 4 * 9)  # blocks of 9 query rows (the last one 7)
        model._mask_cache = None
        blocks = model(x)
    torch.testing.assert_close(blocks, whole, rtol=1e-5, atol=1e-5)
