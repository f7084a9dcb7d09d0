"""The trainer learns, schedules, checkpoints and resumes exactly."""

import pytest
import torch

from pe_bench import runs as runs_mod
from pe_bench import train as train_mod
from pe_bench.config import compose
from pe_bench.data import load_tokens
from pe_bench.config import compile_problem
from pe_bench.device import compile_mode, use_compile
from pe_bench.runs import Run, read_csv
from pe_bench.train import lr_at, train

DEV = torch.device("cpu")


def _cfg(tmp_path, *extra):
    return compose(["scheme=rope", "train=smoke", "model.n_layers=2", "model.d_model=64",
                    f"results_dir={tmp_path}", *extra])


def test_a_tiny_training_run_lowers_the_loss(tmp_path):
    cfg = _cfg(tmp_path, "train.steps=60", "train.val_interval=60", "train.log_interval=10")
    run = Run(tmp_path / "run")
    run.create(cfg)
    train(cfg, run, load_tokens(cfg.data, cfg.cache_dir), DEV, progress=False)
    rows = read_csv(run.train_csv)
    first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
    assert first > 4.0  # ~ln 256 at init
    assert last < first - 1.0 and last < 3.4, (first, last)  # uniform over bytes would be ln 256 = 5.55
    assert float(rows[-1]["val_loss"]) < 3.6
    assert [int(r["step"]) for r in rows] == list(range(10, 61, 10))
    assert all(float(r["tokens_per_s"]) > 0 for r in rows)
    ckpt = torch.load(run.checkpoint, weights_only=False)
    assert {"model", "optimizer", "step", "config", "vocab_size"} <= set(ckpt) and ckpt["step"] == 60


def test_lr_schedule_warms_up_then_decays_to_the_floor(tmp_path):
    tc = _cfg(tmp_path, "train.steps=100", "train.warmup_steps=10", "train.lr=1e-3", "train.min_lr_ratio=0.1").train
    assert lr_at(0, tc) == pytest.approx(1e-4)
    assert lr_at(9, tc) == pytest.approx(1e-3)
    assert lr_at(55, tc) == pytest.approx(0.55e-3)
    assert lr_at(100, tc) == pytest.approx(1e-4)
    assert all(lr_at(s, tc) >= lr_at(s + 1, tc) for s in range(10, 100))


def test_resume_is_bit_identical(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, "train.steps=12", "train.ckpt_interval=0", "train.grad_accum=2")
    corpus = load_tokens(cfg.data, cfg.cache_dir)
    straight = Run(tmp_path / "straight")
    straight.create(cfg)
    train(cfg, straight, corpus, DEV, progress=False)

    interrupted = Run(tmp_path / "interrupted")
    interrupted.create(cfg)
    real, calls = train_mod.random_batch, {"n": 0}

    def dies_after_step_8(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 8 * 2 + 2:  # 2 micro-batches per step: Ctrl-C in step 9's second micro-batch
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "random_batch", dies_after_step_8)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, interrupted, corpus, DEV, progress=False)
    assert torch.load(interrupted.checkpoint, weights_only=False)["step"] == 8  # Ctrl-C saved the last full step
    monkeypatch.setattr(train_mod, "random_batch", real)
    train(cfg, interrupted, corpus, DEV, progress=False)  # resumes at step 8

    a = torch.load(straight.checkpoint, weights_only=False)
    b = torch.load(interrupted.checkpoint, weights_only=False)
    assert a["step"] == b["step"] == 12
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert [r["loss"] for r in read_csv(straight.train_csv)] == [r["loss"] for r in read_csv(interrupted.train_csv)]


def test_bf16_autocast_path_trains_and_evaluates(tmp_path):
    """The precision path used on GPUs, exercised with CPU autocast: finite losses, a usable checkpoint."""
    from pe_bench.experiment import run_one

    cfg = _cfg(tmp_path, "scheme=alibi", "train.precision=bf16", "train.steps=10", "eval=smoke",
               "eval.lengths=[32,64]", "eval.modes=[nonoverlapping]")
    run = run_one(cfg, progress=False)
    rows = read_csv(run.train_csv)
    first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
    assert last < first - 0.5 and last < 4.5, (first, last)  # learning: a uniform model is ln 256 = 5.55
    assert run.meta().precision == "bf16"
    ev = read_csv(run.eval_csv)
    assert [r["status"] for r in ev] == ["ok", "ok"] and {r["precision"] for r in ev} == {"bf16"}


def test_a_crash_resumes_from_the_last_periodic_checkpoint(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, "train.steps=12", "train.ckpt_interval=5")
    corpus = load_tokens(cfg.data, cfg.cache_dir)
    run = Run(tmp_path / "crashed")
    run.create(cfg)
    real, calls = train_mod.random_batch, {"n": 0}

    def crashes_in_step_8(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 8:
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "random_batch", crashes_in_step_8)
    with pytest.raises(RuntimeError):
        train(cfg, run, corpus, DEV, progress=False)
    assert torch.load(run.checkpoint, weights_only=False)["step"] == 5
    monkeypatch.setattr(train_mod, "random_batch", real)
    train(cfg, run, corpus, DEV, progress=False)  # resumes from step 5: the same weights as never crashing
    straight = Run(tmp_path / "straight")
    straight.create(cfg)
    train(cfg, straight, corpus, DEV, progress=False)
    a, b = (torch.load(r.checkpoint, weights_only=False) for r in (straight, run))
    assert a["step"] == b["step"] == 12
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


# Divergence: the loss and the gradient norm are both checked, and no checkpoint ever holds non-finite weights ----------
def _tiny_cli(tmp_path, *extra):
    """`pe-bench train` of a 1-layer model (in-process, so monkeypatches reach it): exit code, the one run dir."""
    from typer.testing import CliRunner

    from pe_bench.cli import app

    r = CliRunner().invoke(app, ["train", "scheme=alibi", "train=smoke", "eval=smoke", "model.n_layers=1",
                                 "model.d_model=32", "train.threads=1", f"results_dir={tmp_path / 'results'}",
                                 *extra, "--no-progress"])
    runs = sorted((tmp_path / "results" / "runs").iterdir())
    assert len(runs) == 1, r.output
    return r, runs[0]


def _finite(state: dict) -> bool:
    return all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


def test_a_nonfinite_gradient_norm_with_a_finite_loss_is_divergence(tmp_path, monkeypatch):
    """The gradient norm is checked, not only the loss: the norm is inf at step 5 (the loss stays finite, the weights
    too) → the run stops as diverged at step 5 naming the gradient norm, exit code 1, and the checkpoint of step 4
    (train.ckpt_interval=2) is kept, finite."""
    import json

    real, calls = torch.nn.utils.clip_grad_norm_, {"n": 0}

    def inf_at_step_5(*args, **kwargs):
        norm = real(*args, **kwargs)
        calls["n"] += 1
        return torch.full_like(norm, float("inf")) if calls["n"] == 5 else norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", inf_at_step_5)
    r, run = _tiny_cli(tmp_path, "train.ckpt_interval=2", "train.log_interval=3")
    assert r.exit_code == 1, r.output
    assert "training diverged at step 5: gradient norm = inf" in r.output
    meta = json.loads((run / "meta.json").read_text())
    assert (meta["status"], meta["diverged_step"], meta["diverged_what"], meta["diverged_value"]) == \
        ("diverged", 5, "gradient norm", "inf")
    assert calls["n"] == 6  # stopped at the first check after step 5 (the checkpoint due at step 6 is not written)
    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == 4 and _finite(ckpt["model"])
    assert meta["checkpoint_step"] == 4
    assert not (run / "eval.csv").exists()


def test_no_checkpoint_is_ever_written_with_nonfinite_weights(tmp_path, monkeypatch):
    """Weights poisoned (NaN) right after step 3's optimizer step: step 4's loss is NaN, and step 4 is a checkpoint
    step (train.ckpt_interval=2) but no log step (train.log_interval=20, the last): the save itself must check, so
    the checkpoint of step 2 stays the last one written — every checkpoint ever written is finite, the one on disk is
    step 2's — and the run is diverged at step 4 (its loss)."""
    import json

    real_make, real_save, written = train_mod.make_optimizer, train_mod.atomic_save, []

    def poisons_after_step_3(model, tc, device):
        opt = real_make(model, tc, device)
        step, calls = opt.step, {"n": 0}

        def step_then_poison(*args, **kwargs):
            out = step(*args, **kwargs)
            calls["n"] += 1
            if calls["n"] == 3:
                with torch.no_grad():
                    next(model.parameters()).fill_(float("nan"))
            return out

        opt.step = step_then_poison
        return opt

    def recording_save(obj, path, *args, **kwargs):
        if isinstance(obj, dict) and "model" in obj:
            written.append((obj["step"], _finite(obj["model"])))
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(train_mod, "make_optimizer", poisons_after_step_3)
    monkeypatch.setattr(train_mod, "atomic_save", recording_save)
    r, run = _tiny_cli(tmp_path, "train.ckpt_interval=2", "train.log_interval=20")
    assert r.exit_code == 1, r.output
    assert written == [(2, True)]  # nothing written from step 4 on
    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)  # unconditionally: step 2's checkpoint is there
    assert ckpt["step"] == 2 and _finite(ckpt["model"])
    meta = json.loads((run / "meta.json").read_text())
    assert (meta["status"], meta["diverged_step"], meta["diverged_what"]) == ("diverged", 4, "loss")
    assert meta["checkpoint_step"] == 2


def _t(v: float) -> torch.Tensor:
    return torch.tensor(v)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_health_names_the_first_nonfinite_step_and_the_loss_before_the_gradient_norm(bad):
    h = train_mod.Health()
    h.add(3, _t(2.0), _t(1.0))
    h.add(4, _t(2.0), _t(bad))
    h.add(5, _t(bad), _t(bad))
    with pytest.raises(train_mod.Diverged) as e:
        h.check()
    assert (e.value.step, e.value.what) == (4, "gradient norm")
    assert str(e.value.value) == str(bad)
    h = train_mod.Health()
    h.add(7, _t(bad), _t(bad))
    with pytest.raises(train_mod.Diverged) as e:
        h.check()
    assert (e.value.step, e.value.what) == (7, "loss")
    assert str(e.value) == (f"training diverged at step 7: loss = {bad}; the last good checkpoint is kept (lower "
                            "train.lr, or raise train.warmup_steps / lower train.grad_clip)")


def test_health_forgets_checked_finite_steps_and_the_steps_after_an_interruption():
    h = train_mod.Health()
    h.add(1, _t(1.0), _t(1.0))
    h.check()  # finite: nothing pending afterwards
    assert h.pending == []
    h.check()  # nothing to check is no error
    h.add(2, _t(5.0), _t(1.0))
    h.add(3, _t(float("nan")), _t(1.0))  # a step whose update never reached the weights
    h.forget_after(2)
    assert [s for s, _, _ in h.pending] == [2]
    h.check()
    assert h.pending == []


def test_check_checkpoint_refuses_another_configuration_or_other_data_by_identity_and_fingerprint(tmp_path):
    """The stored identity decides (a checkpoint without one, from before identities were stored, is judged by the
    identity of its own config); a stored data fingerprint must match the corpus's when the corpus has one."""
    from types import SimpleNamespace

    from pe_bench.config import to_dict
    from pe_bench.runs import RunFileError

    cfg, other = _cfg(tmp_path), _cfg(tmp_path, "train.lr=1e-3")
    run = Run(tmp_path / "run")
    runs_mod.check_checkpoint(run, {"config": to_dict(cfg)}, cfg)
    with pytest.raises(RunFileError, match="belongs to another configuration"):
        runs_mod.check_checkpoint(run, {"config": to_dict(cfg)}, other)
    stored = {"config": to_dict(other), "identity": runs_mod.checkpoint_identity(cfg)}
    runs_mod.check_checkpoint(run, stored, cfg)  # the stored identity wins over the config beside it
    with pytest.raises(RunFileError, match="belongs to another configuration"):
        runs_mod.check_checkpoint(run, stored, other)
    ckpt = {"config": to_dict(cfg), "identity": runs_mod.checkpoint_identity(cfg), "data": "abc"}
    runs_mod.check_checkpoint(run, ckpt, cfg, SimpleNamespace(fingerprint="abc"))
    runs_mod.check_checkpoint(run, ckpt, cfg, object())  # task data: no fingerprint to compare
    runs_mod.check_checkpoint(run, {**ckpt, "data": None}, cfg, SimpleNamespace(fingerprint="xyz"))
    with pytest.raises(RunFileError, match="abc → xyz"):
        runs_mod.check_checkpoint(run, ckpt, cfg, SimpleNamespace(fingerprint="xyz"))


def test_cuda_graphs_are_torch_compiles_reduce_overhead_mode_on_one_gpu_only():
    """train.compile=graphs: the forward compiled with mode="reduce-overhead" (CUDA graphs), refused off CUDA, under
    torchrun (the replayed graph would not hold DDP's all-reduce) and with gradient accumulation (a micro-batch's
    replay would overwrite the gradients the last one left in the graphs' memory); on/auto keep torch's default."""
    graphs, on = compose(["train.compile=graphs"]).train, compose(["train.compile=on"]).train
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert use_compile(graphs, gpu) and compile_mode(graphs) == "reduce-overhead"
    assert use_compile(on, cpu) and compile_mode(on) is None
    assert compile_problem(graphs, "cuda", 1) is None and compile_problem(on, "cpu", 4) is None
    assert "train.compile=on under torchrun" in compile_problem(graphs, "cuda", 2)
    assert "training runs on cpu" in compile_problem(graphs, "cpu", 1)
    accumulating = compose(["train.compile=graphs", "train.batch_size=8", "train.grad_accum=4"]).train
    assert "use train.batch_size=32 train.grad_accum=1" in compile_problem(accumulating, "cuda", 1)
