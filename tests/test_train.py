"""The trainer learns, schedules, checkpoints and resumes exactly."""

import pytest
import torch

from pe_bench import train as train_mod
from pe_bench.config import compose
from pe_bench.data import load_tokens
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
    assert all(float(r["loss"]) < 6.0 for r in rows)
    assert [r["status"] for r in read_csv(run.eval_csv)] == ["ok", "ok"]


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
