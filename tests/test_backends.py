"""Every attention backend computes the same function: every scheme × every backend that can run it here gives the
explicit reference's loss (fp32, ≤ 1e-5) and, where training is possible, its gradients (≤ 1e-5 relative); the
blocked paths (query rows by blocks outside autograd) give the whole computation's logits."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml
from typer.testing import CliRunner

from pe_bench import schemes
from pe_bench.model import attention
from pe_bench.model.attention import backend_problem
from pe_bench.cli import app
from pe_bench.config import ConfigError, compose, config_dir, scheme_spec, with_options
from pe_bench.model.decoder import Decoder, ModelArgs
from pe_bench.schemes import ModelShape

# Every registered scheme, plus the variants whose backends differ from their defaults'.
CASES = [(n, None) for n in schemes.available()] + [
    ("shaw", {"values": False}),  # keys only: FlexAttention can express it
    ("hybrid", {"parts": [{"name": "rope"}, {"name": "t5"}]}),
    ("hybrid", {"parts": [{"name": "sinusoidal"}, {"name": "xl"}]}),
]
L_TRAIN = 16
T = 3 * L_TRAIN  # past the training length: FIRE's progressive interpolation, T5's far buckets, RoPE beyond L
OPTIONS = {"learned": {"beyond_table": "clamp"}}  # a learned table refuses lengths past it
runner = CliRunner()


def scheme_yaml(name: str) -> dict:
    return yaml.safe_load((config_dir() / "scheme" / f"{name}.yaml").read_text())


def case_id(case) -> str:
    name, options = case
    return name if not options else f"{name}-{'-'.join(f'{k}={v}' for k, v in options.items())}"


def build(name: str, options: dict | None, backend: str) -> Decoder | None:
    """The case's model on ``backend`` (same weights for every backend), or None when the backend cannot run it."""
    spec = scheme_spec(scheme_yaml(name))
    if options or name in OPTIONS:
        spec = with_options(spec, options or OPTIONS[name])
    torch.manual_seed(0)
    scheme = spec.cls(spec.options, ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=L_TRAIN, n_layers=2))
    if backend_problem(backend, scheme):
        return None
    model = Decoder(ModelArgs(vocab_size=50, n_layers=2, d_model=32, n_heads=4, backend=backend), scheme)
    with torch.no_grad():  # zero-initialised tables (T5, CoPE) would hide a wrong term: perturb every parameter
        for p in model.scheme.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 50, (2, T + 1), generator=g)
    return x[:, :-1], x[:, 1:]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_backend_gives_the_reference_loss_and_gradients(case):
    x, y = batch()
    ref = build(*case, "explicit")
    ref_loss = F.cross_entropy(ref(x).flatten(0, 1), y.flatten())
    ref_loss.backward()
    trained = 0
    for backend in ("sdpa", "auto"):
        model = build(*case, backend)
        if model is None:
            continue
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        assert abs(loss.item() - ref_loss.item()) <= 1e-5, backend
        loss.backward()
        for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
            if p_ref.grad is None:
                assert p.grad is None or not p.grad.any(), name
                continue
            # relative to the gradient, with a floor for gradients that vanish mathematically (a per-head constant
            # logit, FIRE's last bias: softmax removes it; both sides are rounding noise of ~1e-9)
            err = (p.grad - p_ref.grad).norm() / p_ref.grad.norm().clamp(min=1e-4)
            assert err <= 1e-5, f"{backend}: gradient of {name} differs by {err:.1e} (relative)"
        trained += 1
    assert trained >= 1  # auto runs every scheme


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_outside_autograd_every_backend_and_every_block_size_gives_the_reference_logits(case, monkeypatch):
    """Evaluation: sdpa (whole mask, and the bias by blocks of query rows), explicit by blocks of 5 and of 1 query
    rows, and FlexAttention's forward (the CPU runs it eagerly) all give the explicit whole computation's logits."""
    x, _ = batch()
    with torch.no_grad():
        monkeypatch.setattr(attention, "EXPLICIT_BUDGET", 2**40)
        monkeypatch.setattr(attention, "MASK_BUDGET", 2**40)
        ref = build(*case, "explicit")(x)
        outs = {}
        for backend in ("sdpa", "flex", "explicit"):
            model = build(*case, backend)
            if model is None:
                continue
            outs[backend] = model(x)
            if backend == "sdpa":
                monkeypatch.setattr(attention, "MASK_BUDGET", 4 * T * 4 * 7)  # bias blocks of 7 query rows
                outs["sdpa by blocks"] = model(x)
                monkeypatch.setattr(attention, "MASK_BUDGET", 2**40)
            if backend == "explicit":
                for rows in (5, 1):  # blocks of one sequence's rows
                    monkeypatch.setattr(attention, "EXPLICIT_BUDGET", 4 * T * 4 * rows)
                    outs[f"explicit by {rows} rows"] = model(x)
                monkeypatch.setattr(attention, "EXPLICIT_BUDGET", 2 * 4 * T * 4 * T)  # every row, one sequence a block
                outs["explicit by sequences"] = model(x) if x.shape[0] > 1 else ref
                monkeypatch.setattr(attention, "EXPLICIT_BUDGET", 2**40)
    assert "explicit by 1 rows" in outs
    for what, out in outs.items():
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-5, msg=lambda m, w=what: f"{w}: {m}")


def test_explicit_blocks_are_bounded_outside_autograd_and_whole_under_it():
    q = torch.zeros(2, 4, 1024, 8)
    positions = torch.arange(1024)
    with torch.no_grad():
        seqs, rows = attention.explicit_blocks(q, positions)
        assert seqs * rows * 4 * 1024 * 4 <= attention.EXPLICIT_BUDGET and rows >= 1 and seqs >= 1
        assert attention.explicit_blocks(q, positions.flip(0)) == (2, 1024)  # positions must increase (prefixes)
    assert attention.explicit_blocks(q, positions) == (2, 1024)


def test_explicit_blocks_take_rows_of_one_sequence_first_then_sequences():
    """A block reads its keys once for all its rows: the budget goes to rows of one sequence, then to sequences."""
    positions = torch.arange(64)
    with torch.no_grad():
        assert attention.explicit_blocks(torch.zeros(8, 4, 64, 8), positions) == (8, 64)  # 1 MiB holds it all
        assert attention.explicit_blocks(torch.zeros(8, 8, 2048, 32), torch.arange(2048)) == (1, 16)


@pytest.mark.parametrize("overrides, says", [
    (["scheme=shaw", "attention.backend=sdpa"], "attention.backend=sdpa cannot add shaw's"),
    (["scheme=cope", "attention.backend=flex"], "attention.backend=flex cannot express cope"),
    (["scheme=shaw", "attention.backend=flex"], "value vectors a^V need the attention weights"),
    (["scheme=fire", "attention.backend=flex"], "does not compile into FlexAttention's kernels"),
    (["scheme=alibi", "attention.backend=flex", "train.device=cpu"], "no backward on the CPU"),
    (["scheme=alibi", "attention.backend=flash"], "attention.backend='flash' is not one of"),
])
def test_a_backend_that_cannot_run_the_scheme_is_refused_at_compose_time(overrides, says):
    with pytest.raises(ConfigError, match=None) as e:
        compose(overrides)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_flex_and_explicit_are_accepted_where_they_apply():
    for name in ("alibi", "t5", "kerple_log", "sandwich", "rope", "nope"):
        compose([f"scheme={name}", "attention.backend=flex"])
    compose(["scheme=shaw", "scheme.values=false", "attention.backend=flex"])
    for name in schemes.available():
        compose([f"scheme={name}", "attention.backend=explicit"])


def test_a_run_reevaluated_on_every_backend_gives_the_same_perplexity(smoke_args, tmp_path):
    """The backend is not part of a run's identity: `pe-bench eval RUN attention.backend=...` re-evaluates the same
    weights, at 1024 tokens (the mask by blocks for sdpa, whole for flex), to the same numbers; meta.json says which
    backend evaluated last. A backend that cannot run the scheme is one line, exit 2."""
    assert runner.invoke(app, ["train", "scheme=t5", *smoke_args, "--no-progress"]).exit_code == 0
    run = next((tmp_path / "results" / "runs").iterdir())
    ppl = {}
    for backend in ("auto", "explicit", "flex"):
        r = runner.invoke(app, ["eval", str(run), "eval.lengths=[1024]", "eval.modes=[nonoverlapping]",
                                "eval.variants=false", f"attention.backend={backend}"])
        assert r.exit_code == 0, r.output
        ev = pd.read_csv(run / "eval.csv")
        ppl[backend] = float(ev[(ev["L_eval"] == 1024) & (ev["scheme"] == "t5")]["ppl"].iloc[0])
        assert pd.read_json(run / "meta.json", typ="series")["eval_attention_backend"] == backend
    assert ppl["explicit"] == pytest.approx(ppl["auto"], rel=1e-5)
    assert ppl["flex"] == pytest.approx(ppl["auto"], rel=1e-5)

    assert runner.invoke(app, ["train", "scheme=shaw", *smoke_args, "--no-progress"]).exit_code == 0
    shaw = next(p for p in (tmp_path / "results" / "runs").iterdir() if p.name.startswith("shaw"))
    r = runner.invoke(app, ["eval", str(shaw), "attention.backend=sdpa"])
    assert r.exit_code == 2 and "attention.backend=sdpa cannot add shaw's" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_auto_evaluates_a_score_bias_with_flex_on_cuda_and_trains_with_sdpa():
    """auto: flex for a bias flex expresses, on CUDA, outside autograd, at the forward's own positions (the
    evaluator); sdpa in training, on the CPU, with positions given and for schemes without a bias; explicit for score
    terms; a scheme flex cannot express keeps sdpa."""
    def chosen(name: str, on_cuda: bool, grad: bool, positions: torch.Tensor | None = None) -> str:
        cfg = compose([f"scheme={name}"])
        spec = scheme_spec(cfg.scheme)
        scheme = spec.cls(spec.options, ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=8, n_layers=2))
        with torch.set_grad_enabled(grad):
            return attention.choose_backend("auto", scheme, False, positions, on_cuda)

    for name in ("alibi", "t5", "kerple_power", "sandwich", "hybrid"):
        assert chosen(name, on_cuda=True, grad=False) == "flex"
        assert chosen(name, on_cuda=True, grad=True) == "sdpa"
        assert chosen(name, on_cuda=False, grad=False) == "sdpa"
        # positions given (randomized, PoSE): a flex kernel would compile for every batch's positions
        assert chosen(name, on_cuda=True, grad=False, positions=torch.arange(8) * 3) == "sdpa"
    for name in ("nope", "rope", "sinusoidal"):  # no bias: flash SDPA
        assert chosen(name, on_cuda=True, grad=False) == "sdpa"
    assert chosen("fire", on_cuda=True, grad=False) == "sdpa"  # refused on flex
    assert chosen("xl", on_cuda=True, grad=False) == "explicit"
