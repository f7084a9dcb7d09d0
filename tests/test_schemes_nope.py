"""NoPE and its per-head attention temperature (Wang et al. 2024, arXiv:2404.12224, §4): softmax(λ_{l,h}·q·k/√d).

Plain NoPE has no parameters and keeps its run names; with ``head_scale`` each layer and head has a λ, which is
exactly a scale of that head's query projection; a run trained without λ is read at the uniform scale (the
training-free rows); HeadScale fine-tunes the λ alone, the rest of the weights untouched."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from pe_bench.build import build_model
from pe_bench.cli import app
from pe_bench.config import ConfigError, compose
from pe_bench.experiment import run_one
from pe_bench.finetune import compose_finetune, finetune_tag
from pe_bench.model.decoder import Decoder, ModelArgs
from pe_bench.runs import run_name
from pe_bench.schemes import ModelShape
from pe_bench.schemes.nope import NoPE, NoPEOptions

SHAPE = ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=16, n_layers=2)
TINY = ["train=smoke", "train.steps=3", "eval=smoke", "eval.lengths=[32]", "eval.modes=[nonoverlapping]",
        "eval.variants=false", "model.n_layers=2", "model.d_model=32", "model.n_heads=2", "train.threads=1"]


def model(head_scale: float | None, seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    args = ModelArgs(vocab_size=50, n_layers=2, d_model=32, n_heads=4)
    return Decoder(args, NoPE(NoPEOptions(head_scale=head_scale), SHAPE)).eval()


def test_plain_nope_has_no_parameters_and_keeps_the_default_tables_run_name():
    assert not list(NoPE(NoPEOptions(), SHAPE).parameters())
    # the committed default table's NoPE run (results/default/runs): the new option leaves its name alone
    assert run_name(compose(["scheme=nope"])) == "nope-tiny-shakespeare-L64-s0-4d04dda6"
    assert run_name(compose(["scheme=nope", "scheme.head_scale=1.5"])) != "nope-tiny-shakespeare-L64-s0-4d04dda6"


def test_a_head_scale_is_a_temperature_on_that_heads_logits():
    """λ_{l,h}·q·k/√d: the model with scales equals plain NoPE whose query rows of head h in layer l are × λ_{l,h}."""
    scaled, plain = model(1.0), model(None)
    lam = torch.tensor([[0.5, 1.0, 1.7, 3.0], [2.0, 0.25, 1.0, 1.3]])
    with torch.no_grad():
        scaled.scheme.scale.copy_(lam)
        for layer, block in enumerate(plain.blocks):
            w = block.attn.qkv.weight  # (3C, C): q rows first, head h = rows h·D … (h+1)·D
            w[:32] *= lam[layer].repeat_interleave(8)[:, None]
    x = torch.randint(0, 50, (2, 24))
    with torch.no_grad():
        torch.testing.assert_close(scaled(x), plain(x), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(scaled(x), model(None)(x), atol=1e-3)  # and the scales did change the output


def test_a_uniform_scale_of_one_is_plain_nope():
    x = torch.randint(0, 50, (2, 24))
    with torch.no_grad():
        torch.testing.assert_close(model(1.0)(x), model(None)(x), rtol=0, atol=1e-6)


def test_the_scaled_scheme_stays_shift_invariant():
    """Relative: shifting every position leaves the logits unchanged (the scale does not depend on position)."""
    m, x = model(1.6), torch.randint(0, 50, (1, 20))
    with torch.no_grad():
        m.scheme.scale.mul_(torch.rand_like(m.scheme.scale) + 0.5)
        torch.testing.assert_close(m(x), m(x, positions=torch.arange(20) + 37), rtol=1e-5, atol=1e-5)


def test_weights_without_scales_start_at_the_uniform_scale_and_foreign_scales_are_refused():
    s = NoPE(NoPEOptions(head_scale=1.5), SHAPE)
    state: dict[str, torch.Tensor] = {}
    s.inherit(state, "scheme.", "extend")
    assert torch.equal(state["scheme.scale"], torch.full((2, 4), 1.5)) and float(state["scheme.scale_start"]) == 1.5
    learnt = {"scheme.scale": torch.rand(2, 4), "scheme.scale_start": torch.tensor(1.5)}
    kept = dict(learnt)
    s.inherit(kept, "scheme.", "extend")
    assert kept["scheme.scale"] is learnt["scheme.scale"]  # a run's own learnt λ stay
    with pytest.raises(ValueError, match="learnt from scheme.head_scale=1.5"):
        NoPE(NoPEOptions(head_scale=1.2), SHAPE).inherit(dict(learnt), "scheme.", "extend")
    with pytest.raises(ValueError, match="head_scale is null|learnt from"):
        NoPE(NoPEOptions(), SHAPE).inherit(dict(learnt), "scheme.", "extend")


def test_headscale_finetunes_the_scales_alone(tmp_path):
    """`pe-bench finetune RUN scheme.head_scale=1.6 finetune.trainable=scheme`: every weight of the parent stays bit
    for bit, the λ move from 1.6, and the row says what was trained."""
    parent = run_one(compose(["scheme=nope", *TINY, f"results_dir={tmp_path}"]), progress=False)
    cfg = compose_finetune(parent.path, ["train=headscale", "train.seq_len=64", "train.batch_size=2",
                                         "train.steps=4", "train.warmup_steps=1", "train.threads=1",
                                         "scheme.head_scale=1.6", "finetune.trainable=scheme"])
    child = run_one(cfg, progress=False)
    before = torch.load(parent.checkpoint, weights_only=False)["model"]
    after = torch.load(child.checkpoint, weights_only=False)["model"]
    assert set(after) - set(before) == {"scheme.scale", "scheme.scale_start"}
    for k in before:
        assert torch.equal(before[k], after[k]), k
    assert not torch.allclose(after["scheme.scale"], torch.full_like(after["scheme.scale"], 1.6))
    assert {r.split(",")[0] for r in child.eval_csv.read_text().splitlines()[1:]} == {"nope[head_scale=1.6]"}
    assert finetune_tag(cfg) == " scheme-only ft4@64"  # what the report's rows add to that label
    # the identity holds what trained: the same fine-tune of every weight is another run
    full = compose_finetune(parent.path, ["train=headscale", "train.seq_len=64", "train.batch_size=2",
                                          "train.steps=4", "train.warmup_steps=1", "scheme.head_scale=1.6"])
    assert run_name(full) != child.path.name


def test_a_scheme_only_finetune_of_a_scheme_without_parameters_is_one_line(tmp_path):
    parent = run_one(compose(["scheme=nope", *TINY, f"results_dir={tmp_path}"]), progress=False)
    r = CliRunner().invoke(app, ["finetune", str(parent.path), "finetune.trainable=scheme"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "has no parameters to train" in r.output
    with pytest.raises(ConfigError, match="no parent run"):
        compose(["scheme=nope", "finetune.trainable=scheme"])


def test_a_run_with_learnt_scales_is_loaded_with_them(tmp_path):
    """Training with head_scale learns λ with the model; its checkpoint evaluates with those λ."""
    cfg = compose(["scheme=nope", "scheme.head_scale=1.3", *TINY, f"results_dir={tmp_path}"])
    run = run_one(cfg, progress=False)
    state = torch.load(run.checkpoint, weights_only=False)["model"]
    assert not torch.allclose(state["scheme.scale"], torch.full((2, 2), 1.3))
    m = build_model(cfg, 256)
    assert m.scheme.scale.shape == (2, 2)
