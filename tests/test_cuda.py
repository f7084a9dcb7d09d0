"""The GPU path, on a CUDA device (skipped elsewhere; CI has none): every scheme × every backend that can run it gives
the explicit reference's logits and gradients on the GPU (fp32, FlexAttention compiled), a compiled bf16 training
step learns, and `pe-bench train` on CUDA records bf16 + compile and evaluates past L."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
import yaml
from typer.testing import CliRunner

from pe_bench import schemes
from pe_bench.model.attention import backend_problem
from pe_bench.cli import app
from pe_bench.config import config_dir, scheme_spec, with_options
from pe_bench.model.decoder import Decoder, ModelArgs
from pe_bench.schemes import ModelShape

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CASES = [(n, None) for n in schemes.available()] + [("shaw", {"values": False})]
L_TRAIN = 16
T = 3 * L_TRAIN  # past the training length
OPTIONS = {"learned": {"beyond_table": "clamp"}}
DEV = torch.device("cuda")


@pytest.fixture(autouse=True)
def _exact_fp32():
    """TF32 would make the fp32 comparisons bf16-like; the tests compare fp32 against fp32."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def case_id(case) -> str:
    name, options = case
    return name if not options else f"{name}-{'-'.join(f'{k}={v}' for k, v in options.items())}"


def build(name: str, options: dict | None, backend: str) -> Decoder | None:
    spec = scheme_spec(yaml.safe_load((config_dir() / "scheme" / f"{name}.yaml").read_text()))
    if options or name in OPTIONS:
        spec = with_options(spec, options or OPTIONS[name])
    torch.manual_seed(0)
    scheme = spec.cls(spec.options, ModelShape(d_model=64, n_heads=4, head_dim=16, train_seq_len=L_TRAIN, n_layers=2))
    if backend_problem(backend, scheme):
        return None
    model = Decoder(ModelArgs(vocab_size=50, n_layers=2, d_model=64, n_heads=4, backend=backend), scheme)
    with torch.no_grad():
        for p in model.scheme.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model.to(DEV)


def batch(t: int = T) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 50, (2, t + 1), generator=g).to(DEV)
    return x[:, :-1], x[:, 1:]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_on_cuda_every_backend_gives_the_reference_loss_and_gradients(case):
    x, y = batch()
    ref = build(*case, "explicit")
    ref_loss = F.cross_entropy(ref(x).flatten(0, 1), y.flatten())
    ref_loss.backward()
    for backend in ("sdpa", "flex", "auto"):
        model = build(*case, backend)
        if model is None:
            continue
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        assert abs(loss.item() - ref_loss.item()) <= 1e-4, backend
        loss.backward()
        for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
            if p_ref.grad is None:
                continue
            err = (p.grad - p_ref.grad).norm() / p_ref.grad.norm().clamp(min=1e-3)
            assert err <= 1e-3, f"{backend}: gradient of {name} differs by {err:.1e} (relative)"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_on_cuda_a_compiled_bf16_training_step_learns_and_matches_fp32(case):
    """torch.compile + bf16 autocast, the trainer's GPU recipe: the compiled bf16 logits are the eager fp32 logits
    up to bf16 rounding, and 30 steps on one batch bring the loss down."""
    name, options = case
    model = build(name, options, "auto")
    x, y = batch(L_TRAIN)
    with torch.no_grad():
        ref = model(x).float().log_softmax(-1)
    fwd = torch.compile(model)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        out = fwd(x).float().log_softmax(-1)
    assert torch.isfinite(out).all()
    assert (out - ref).abs().max() < 0.15, f"bf16 compiled log-probs differ by {(out - ref).abs().max():.3f}"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(fwd(x).float().flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert all(map(lambda v: v == v, losses)) and losses[-1] < 0.7 * losses[0], losses


@pytest.mark.parametrize("backend", ["auto", "flex"])
def test_pe_bench_train_on_cuda_uses_bf16_and_compile_and_evaluates_past_L(backend, tmp_path):
    r = CliRunner().invoke(app, ["train", "scheme=alibi", "train=smoke", "eval=smoke", "model.n_layers=2",
                                 "model.d_model=64", "train.device=cuda", f"attention.backend={backend}",
                                 f"results_dir={tmp_path}", "--no-progress"])
    assert r.exit_code == 0, r.output
    run = next((tmp_path / "runs").iterdir())
    meta = json.loads((run / "meta.json").read_text())
    assert meta["precision"] == "bf16" and meta["compiled"] is True and meta["eval_attention_backend"] == backend
    import pandas as pd

    ev = pd.read_csv(run / "eval.csv")
    # a uniform model scores 256 (byte vocabulary); this recipe reaches ~34 at L on the CPU, and ALiBi stays flat
    assert ev["L_eval"].max() >= 4 * 32 and ev["ppl"].notna().all() and (ev["ppl"] < 100).all()


def test_pe_bench_train_with_cuda_graphs_learns_as_the_default_compile_does(tmp_path):
    """train.compile=graphs (torch.compile mode="reduce-overhead"): the same run as train.compile=on, its forward and
    backward replayed as CUDA graphs, reaches the same loss (bf16 and kernel choice apart) and is recorded compiled."""
    finals = {}
    for mode in ("on", "graphs"):
        r = CliRunner().invoke(app, ["train", "task=passkey", "scheme=alibi", "train.steps=60", "train.device=cuda",
                                     f"train.compile={mode}", "eval.ratios=[1,2]", f"results_dir={tmp_path / mode}",
                                     "--no-progress"])
        assert r.exit_code == 0, r.output
        run = next((tmp_path / mode / "runs").iterdir())
        meta = json.loads((run / "meta.json").read_text())
        assert meta["status"] == "done" and meta["compiled"] is True
        finals[mode] = float(meta["final_train_loss"])
    assert abs(finals["graphs"] - finals["on"]) < 0.05 * finals["on"], finals


FLEX_TRAINED = ["alibi", "t5", "kerple_log", "kerple_power", "sandwich", "hybrid"]


@pytest.mark.parametrize("name", FLEX_TRAINED)
def test_on_cuda_flex_trains_every_bias_scheme_at_head_dimension_64_in_bf16(name):
    """The trainer's GPU recipe at the head dimension of model=small (64), where torch's default backward tiles do not
    fit an H100's shared memory (pe_bench.model.attention.FLEX_KERNEL_OPTIONS): the compiled bf16 step on flex
    compiles, and its loss and gradients are the explicit reference's (fp32, eager) up to bf16 rounding."""
    spec = scheme_spec(yaml.safe_load((config_dir() / "scheme" / f"{name}.yaml").read_text()))
    x, y = batch(256)
    losses, grads = {}, {}
    for backend in ("explicit", "flex"):
        torch.manual_seed(0)
        scheme = spec.cls(spec.options, ModelShape(d_model=128, n_heads=2, head_dim=64, train_seq_len=256, n_layers=2))
        model = Decoder(ModelArgs(vocab_size=50, n_layers=2, d_model=128, n_heads=2, backend=backend), scheme).to(DEV)
        if backend == "flex":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = torch.compile(model)(x)
        else:
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        losses[backend] = loss.item()
        grads[backend] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert abs(losses["flex"] - losses["explicit"]) < 0.02 * losses["explicit"]
    for n, g_ref in grads["explicit"].items():
        err = (grads["flex"][n].float() - g_ref).norm() / g_ref.norm().clamp(min=1e-3)
        assert err < 0.05, f"gradient of {n} differs by {err:.2e} (relative) from the explicit reference"
