"""The training loop: AdamW, warmup + cosine, clipping, accumulation, bf16/compile on GPU, checkpoints, logging."""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pe_bench.attention import backend_problem
from pe_bench.build import build_model
from pe_bench.config import Config, ConfigError, TrainConfig, to_dict
from pe_bench.data import TokenizedCorpus, random_batch
from pe_bench.device import autocast, use_compile
from pe_bench.distributed import StopRequested, World, any_across, mean_across, stop_requested
from pe_bench.model import Decoder, pose_positions, random_positions
from pe_bench.progress import TrainProgress, use_bar
from pe_bench.runs import (Run, RunFileError, atomic_save, check_checkpoint, checkpoint_identity, digest, identity,
                           read_csv, write_csv)
from pe_bench.tasks import TaskData, batch_rng

TRAIN_COLUMNS = ["step", "loss", "lr", "tokens_per_s", "val_loss", "elapsed_s"]
VAL_SEED = 1234


class Diverged(RuntimeError):
    """A non-finite loss or gradient norm: training stopped; the last checkpoint (if any) predates it."""

    def __init__(self, step: int, what: str, value: float) -> None:
        super().__init__(f"training diverged at step {step}: {what} = {value}; the last good checkpoint is kept "
                         "(lower train.lr, or raise train.warmup_steps / lower train.grad_clip)")
        self.step, self.what, self.value = step, what, value


class Health:
    """Loss and gradient norm of the steps not yet checked, kept on the device: one host sync per check."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (step, loss, grad norm)

    def add(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        self.pending.append((step, loss.detach(), grad_norm.detach()))

    def forget_after(self, step: int) -> None:
        """Drop the steps after ``step`` (an interrupted step's numbers: its update is not in the weights)."""
        self.pending = [h for h in self.pending if h[0] <= step]

    def check(self) -> None:
        """Raise Diverged for the first pending step whose loss (checked first) or gradient norm is not finite."""
        if not self.pending:
            return
        values = torch.stack([torch.stack([lo.float(), gn.float()]) for _, lo, gn in self.pending]).cpu()
        bad = (~torch.isfinite(values)).nonzero()
        if len(bad):
            i, j = int(bad[0, 0]), int(bad[0, 1])
            raise Diverged(self.pending[i][0], "loss" if j == 0 else "gradient norm", float(values[i, j]))
        self.pending.clear()


def load_parent(model: Decoder, cfg: Config, device: torch.device, corpus=None) -> int:
    """Put the parent's final weights into ``model`` (the fine-tune's, freshly built): checked to be the parent the
    config names, on the same data, at its last step; the scheme adapts what its shapes changed (``inherit``).
    Returns the parent's step."""
    f = cfg.finetune
    parent = Run(Path(f.from_run).expanduser())
    if parent.path.name != f.parent:
        raise RunFileError(f"{parent.path} is not {f.parent}, the parent this fine-tune was made from; put the parent "
                           "back or fine-tune the run that is there with `pe-bench finetune`")
    pcfg = parent.load_config()
    ckpt = parent.load_checkpoint(device)
    check_checkpoint(parent, ckpt, pcfg, corpus)
    if digest(identity(pcfg, seed=False)) != f.parent_config or int(ckpt["step"]) != pcfg.train.steps:
        raise RunFileError(f"{parent.checkpoint} is not the finished parent this fine-tune was made from (step "
                           f"{ckpt['step']}/{pcfg.train.steps}); put the parent back as it was")
    state = dict(ckpt["model"])
    try:
        model.scheme.inherit(state, "scheme.", f.new_positions)
        model.load_state_dict(state)
    except (ValueError, RuntimeError) as e:
        raise ConfigError(f"the parent's weights do not fit this fine-tune: {str(e).strip().splitlines()[0]}") from None
    return int(ckpt["step"])


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warmup to tc.lr, then cosine decay to tc.lr·min_lr_ratio at tc.steps."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    progress = min(1.0, (step - tc.warmup_steps) / max(1, tc.steps - tc.warmup_steps))
    floor = tc.lr * tc.min_lr_ratio
    return floor + 0.5 * (tc.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: Decoder, tc: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (nanoGPT's rule); fused kernel where this build has one."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.beta1, tc.beta2), fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.beta1, tc.beta2))


def batch_generator(seed: int, step: int, micro: int) -> torch.Generator:
    """Batches are a pure function of (seed, step, micro-step): resuming replays exactly the same data."""
    return torch.Generator().manual_seed(((seed * 1_000_003 + step) * 64 + micro) % (2**63))


def batch_positions(tc: TrainConfig, g: torch.Generator, device: torch.device,
                    training: bool = True) -> torch.Tensor | None:
    """Positions for one batch, shared by its rows: None (0..L-1) unless randomized positions (training and
    validation) or PoSE (training only) are on."""
    if tc.random_positions:
        return random_positions(tc.random_positions, tc.seq_len, g).to(device)
    if tc.pose_target and training:
        return pose_positions(tc.seq_len, tc.pose_target, tc.pose_chunks, g).to(device)
    return None


def next_batch(data: TokenizedCorpus | TaskData, split: str, tc: TrainConfig, g: torch.Generator, progress: float,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """x, y: (B, L) and the loss mask (B, L) — None for language modelling (every target scored), the answer
    tokens for a task. A pure function of the generator ``g`` (and, for a task's curriculum, ``progress``)."""
    if isinstance(data, TaskData):
        if split == "train":
            b = data.task.train_batch(batch_rng(g), tc.batch_size, tc.seq_len, progress)
        else:  # held-out examples that fill L
            b = data.task.heldout_set(tc.seq_len, tc.batch_size, seed=int(torch.randint(0, 2**31, (1,), generator=g)))
        return b.x.to(device), b.y.to(device), b.mask.to(device)
    x, y = random_batch(data.splits[split], tc.batch_size, tc.seq_len, g, device)
    return x, y, None


def loss_of(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean cross-entropy over the scored targets: all of them (mask None), or those where mask is True."""
    if mask is None:
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
    m = mask.flatten().float()
    return (nll * m).sum() / m.sum().clamp(min=1)


@torch.inference_mode()
def validation_loss(model: Decoder, data: TokenizedCorpus | TaskData, tc: TrainConfig, device: torch.device) -> float:
    was_training = model.training
    model.eval()
    g = torch.Generator().manual_seed(VAL_SEED)
    ctx = autocast(tc, device)
    losses = []
    for _ in range(tc.val_batches):
        x, y, mask = next_batch(data, "validation", tc, g, 1.0, device)
        with ctx:
            logits = model(x, batch_positions(tc, g, device, training=False))
        losses.append(loss_of(logits, y, mask).item())
    model.train(was_training)
    return float(np.mean(losses))


def train(cfg: Config, run: Run, corpus: TokenizedCorpus | TaskData, device: torch.device, progress: bool = True,
          world: World = World()) -> Decoder:
    """Train (or resume, or just load if already trained) the run's model; returns it in eval mode.

    With several processes (``world.size`` > 1, DDP) each takes every world.size-th micro-batch of a step and only
    rank 0 writes the run directory. A stop request (signal) ends training at a step boundary with a checkpoint."""
    tc = cfg.train
    if tc.grad_accum % world.size:
        raise ConfigError(f"train.grad_accum={tc.grad_accum} must be a multiple of the {world.size} processes; set "
                          f"train.grad_accum={world.size * max(1, tc.grad_accum // world.size)} (the global batch "
                          "is batch_size × grad_accum whatever the number of processes)")
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, corpus.vocab_size).to(device)
    step, history, window_losses = 0, [], []
    if cfg.finetune.from_run and not run.checkpoint.exists():  # a fine-tune starts from its parent's weights
        load_parent(model, cfg, device, corpus)
    opt = make_optimizer(model, tc, device)
    if run.checkpoint.exists():
        ckpt = run.load_checkpoint(device)
        check_checkpoint(run, ckpt, cfg, corpus)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        step = int(ckpt["step"])
        history = [r for r in read_csv(run.train_csv) if int(r["step"]) <= step]
        window_losses = list(ckpt.get("log_window", []))  # losses since the last log line
    if step >= tc.steps:
        return model.eval()
    problem = backend_problem(cfg.attention.backend, model.scheme, cpu_training=device.type == "cpu")
    if problem:
        raise ConfigError(problem)
    if step and world.is_main:
        run.update_meta(resumed_from=[*run.meta().get("resumed_from", []), step])

    ddp = None
    if world.size > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    net = ddp or model
    fwd = torch.compile(net) if use_compile(tc, device) else net
    ctx = autocast(tc, device)
    tokens_per_step = tc.batch_size * tc.seq_len * tc.grad_accum
    my_micro = list(range(world.rank, tc.grad_accum, world.size))  # this process's share of each step's batch
    model.train()
    # A bar on a terminal; otherwise (a log file, --no-progress) plain lines. Rank 0 alone shows either.
    shown = TrainProgress(run.path.name, step, tc.steps, tokens_per_step, bar=use_bar(progress),
                          quiet=not world.is_main)
    t_start = t_log = time.perf_counter()
    elapsed_before = float(history[-1]["elapsed_s"]) if history else 0.0
    completed = step  # optimizer steps whose update is in the weights
    health = Health()

    def save(at: int) -> None:
        health.check()  # never save weights that a non-finite step produced
        if world.is_main:
            atomic_save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": at,
                         "config": to_dict(cfg), "identity": checkpoint_identity(cfg),
                         "data": getattr(corpus, "fingerprint", None), "vocab_size": corpus.vocab_size,
                         "log_window": [float(v) for v in window_losses]}, run.checkpoint)
            run.update_meta(checkpoint_step=at)

    try:
        for step in range(step, tc.steps):
            lr = lr_at(step, tc)
            for group in opt.param_groups:
                group["lr"] = lr
            total = torch.zeros((), device=device)  # summed on the device: no host sync until a log line
            for i, micro in enumerate(my_micro):
                g = batch_generator(cfg.seed, cfg.finetune.data_offset + step, micro)  # a fine-tune continues
                x, y, mask = next_batch(corpus, "train", tc, g, step / tc.steps, device)
                positions = batch_positions(tc, g, device)
                # DDP all-reduces (averages) gradients on the last micro-step only.
                sync = ddp.no_sync() if ddp is not None and i < len(my_micro) - 1 else nullcontext()
                with sync:
                    with ctx:
                        logits = fwd(x) if positions is None else fwd(x, positions)
                    loss = loss_of(logits, y, mask) / len(my_micro)
                    loss.backward()
                total += loss.detach()
            # The norm is computed either way (max_norm=inf scales by 1): a non-finite one means divergence.
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                       tc.grad_clip if tc.grad_clip > 0 else float("inf"))
            opt.step()
            opt.zero_grad(set_to_none=True)
            completed = done = step + 1
            reduced = mean_across(world, total) if world.size > 1 else total  # the same value on every rank
            window_losses.append(reduced)
            health.add(done, reduced, grad_norm)  # so every rank stops at the same step
            shown.step(done, reduced, lr)
            is_last = done == tc.steps
            if done % tc.log_interval == 0 or is_last:
                health.check()
                window_losses = [float(v) for v in window_losses]  # the one host sync per log interval
                now = time.perf_counter()
                tps = len(window_losses) * tokens_per_step / max(now - t_log, 1e-9)
                row = {"step": done, "loss": round(float(np.mean(window_losses)), 5), "lr": f"{lr:.3e}",
                       "tokens_per_s": round(tps), "val_loss": "",
                       "elapsed_s": round(elapsed_before + now - t_start, 2)}
                if world.is_main and (done % tc.val_interval == 0 or is_last):
                    row["val_loss"] = round(validation_loss(model, corpus, tc, device), 5)
                history.append(row)
                if world.is_main:
                    write_csv(run.train_csv, history, TRAIN_COLUMNS)
                shown.postfix(row["loss"], lr, tps)
                window_losses, t_log = [], time.perf_counter()
            if is_last or (tc.ckpt_interval and done % tc.ckpt_interval == 0):
                save(done)
            # Every process must stop at the same step: with DDP the flag is agreed on at each log line.
            agree_now = not is_last and (world.size == 1 or done % tc.log_interval == 0)
            if agree_now and any_across(world, stop_requested(), device):
                raise StopRequested(f"stopped at step {done}/{tc.steps}: checkpoint saved")
    except (KeyboardInterrupt, StopRequested):
        # Ctrl-C or a signal: keep the work done so far; the same command resumes from here.
        window_losses = window_losses[: completed - int(history[-1]["step"] if history else 0)]
        health.forget_after(completed)
        save(completed)
        raise
    finally:
        shown.close()
    seconds = time.perf_counter() - t_start
    if world.is_main:
        run.update_meta(train_seconds=round(elapsed_before + seconds, 2),
                        train_tokens_per_s=round(_mean_tps(history)),
                        final_train_loss=history[-1]["loss"], final_val_loss=history[-1]["val_loss"],
                        n_params=model.num_params(), tokens_seen=tc.steps * tokens_per_step)
    return model.eval()


def _mean_tps(history: list[dict]) -> float:
    """Median throughput over logged windows, skipping the first (warm-up, compile)."""
    values = [float(r["tokens_per_s"]) for r in history[1:]] or [float(r["tokens_per_s"]) for r in history]
    return float(np.median(values)) if values else 0.0


def load_trained(run: Run, cfg: Config, device: torch.device, spec=None, corpus: TokenizedCorpus | None = None,
                 trained: Config | None = None) -> tuple[Decoder, int]:
    """The run's trained model from its checkpoint (checked to be the one ``trained`` — default ``cfg`` — defines, on
    this data), optionally with other (eval-time) scheme options, and the step its weights come from."""
    ckpt = run.load_checkpoint(device)
    check_checkpoint(run, ckpt, trained or cfg, corpus)
    model = build_model(cfg, int(ckpt["vocab_size"]), spec).to(device)
    model.load_state_dict(ckpt["model"])
    return model.eval(), int(ckpt["step"])
