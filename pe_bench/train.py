"""The training loop: AdamW, warmup + cosine, clipping, accumulation, bf16/compile on GPU, checkpoints, logging."""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pe_bench.model.attention import backend_problem
from pe_bench.build import build_model
from pe_bench.config import Config, ConfigError, TrainConfig, to_dict
from pe_bench.data import TokenizedCorpus, random_batch
from pe_bench.device import autocast, compile_mode, use_compile
from pe_bench.distributed import StopRequested, World, any_across, mean_across, stop_requested
from pe_bench.model.decoder import Decoder, pose_positions, random_positions
from pe_bench.progress import TrainProgress, use_bar
from pe_bench.runs import (Run, RunFileError, atomic_save, check_checkpoint, checkpoint_identity, digest, identity,
                           read_csv, write_csv)
from pe_bench.tasks import TaskData, batch_rng
from pe_bench.tracking import Tracker

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


def freeze(model: Decoder, trainable: str) -> None:
    """finetune.trainable=scheme: only the scheme's parameters train (HeadScale, Wang et al. 2024: the head scales
    alone), the rest keeps the parent's weights; ``all`` leaves every parameter trainable."""
    if trainable == "all":
        return
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("scheme."))


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
          world: World = World(), tracker: Tracker | None = None) -> Decoder:
    """Train (or resume, or just load if already trained) the run's model; returns it in eval mode.

    With several processes (``world.size`` > 1, DDP) each takes every world.size-th micro-batch of a step and only
    rank 0 writes the run directory. A stop request (signal) ends training at a step boundary with a checkpoint.
    ``tracker``: where each train.csv row is also logged (pe_bench.tracking; rank 0's)."""
    tc = cfg.train
    if tc.grad_accum % world.size:
        raise ConfigError(f"train.grad_accum={tc.grad_accum} must be a multiple of the {world.size} processes; set "
                          f"train.grad_accum={world.size * max(1, tc.grad_accum // world.size)} (the global batch "
                          "is batch_size × grad_accum whatever the number of processes)")
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, corpus.vocab_size).to(device)
    if cfg.finetune.from_run and not run.checkpoint.exists():  # a fine-tune starts from its parent's weights
        load_parent(model, cfg, device, corpus)
    freeze(model, cfg.finetune.trainable)
    opt = make_optimizer(model, tc, device)
    step, history, window_losses = _resume(run, cfg, corpus, device, model, opt)
    if step >= tc.steps:
        return model.eval()
    problem = backend_problem(cfg.attention.backend, model.scheme, cpu_training=device.type == "cpu")
    if problem:
        raise ConfigError(problem)
    if step and world.is_main:
        run.update_meta(resumed_from=[*(run.meta().resumed_from or []), step])
    Trainer(cfg, run, corpus, device, model, opt, world, history, window_losses, tracker).run(step, progress)
    return model.eval()


def _resume(run: Run, cfg: Config, corpus: TokenizedCorpus | TaskData, device: torch.device, model: Decoder,
            opt: torch.optim.Optimizer) -> tuple[int, list[dict], list]:
    """(step, the train.csv rows up to it, the losses since its last log line) of the run's checkpoint, its weights
    and optimizer state loaded into ``model`` and ``opt``; (0, [], []) without a checkpoint."""
    if not run.checkpoint.exists():
        return 0, [], []
    ckpt = run.load_checkpoint(device)
    check_checkpoint(run, ckpt, cfg, corpus)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    step = int(ckpt["step"])
    history = [r for r in read_csv(run.train_csv) if int(r["step"]) <= step]
    return step, history, list(ckpt.get("log_window", []))


class Trainer:
    """The training loop of one run from a step on: micro-batches, clipping, the optimizer step, a log line (and
    validation) every train.log_interval steps, checkpoints; the loss and gradient norm checked for divergence."""

    def __init__(self, cfg: Config, run: Run, corpus: TokenizedCorpus | TaskData, device: torch.device,
                 model: Decoder, opt: torch.optim.Optimizer, world: World, history: list[dict],
                 window_losses: list, tracker: Tracker | None = None) -> None:
        self.cfg, self.tc, self.run_dir, self.corpus, self.device = cfg, cfg.train, run, corpus, device
        self.tracker = tracker or Tracker()
        self.model, self.opt, self.world = model, opt, world
        self.history, self.window_losses = history, window_losses
        self.ddp = None
        if world.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        net = self.ddp or model
        self.fwd = torch.compile(net, mode=compile_mode(self.tc)) if use_compile(self.tc, device) else net
        self.graphs = self.tc.compile == "graphs"
        self.ctx = autocast(self.tc, device)
        self.tokens_per_step = self.tc.batch_size * self.tc.seq_len * self.tc.grad_accum
        self.my_micro = list(range(world.rank, self.tc.grad_accum, world.size))  # this process's share of a step
        self.health = Health()
        self.elapsed_before = float(history[-1]["elapsed_s"]) if history else 0.0

    def run(self, step: int, progress: bool) -> None:
        tc, world = self.tc, self.world
        self.model.train()
        # A bar on a terminal; otherwise (a log file, --no-progress) plain lines. Rank 0 alone shows either.
        self.shown = TrainProgress(self.run_dir.path.name, step, tc.steps, self.tokens_per_step, bar=use_bar(progress),
                                   quiet=not world.is_main)
        self.t_start = self.t_log = time.perf_counter()
        completed = step  # optimizer steps whose update is in the weights
        try:
            for step in range(step, tc.steps):
                lr = lr_at(step, tc)
                reduced, grad_norm = self.step(step, lr)
                completed = done = step + 1
                self.window_losses.append(reduced)
                self.health.add(done, reduced, grad_norm)  # so every rank stops at the same step
                self.shown.step(done, reduced, lr)
                is_last = done == tc.steps
                if done % tc.log_interval == 0 or is_last:
                    self.log(done, lr, is_last)
                if is_last or (tc.ckpt_interval and done % tc.ckpt_interval == 0):
                    self.save(done)
                # Every process must stop at the same step: with DDP the flag is agreed on at each log line.
                agree_now = not is_last and (world.size == 1 or done % tc.log_interval == 0)
                if agree_now and any_across(world, stop_requested(), self.device):
                    raise StopRequested(f"stopped at step {done}/{tc.steps}: checkpoint saved")
        except (KeyboardInterrupt, StopRequested):
            # Ctrl-C or a signal: keep the work done so far; the same command resumes from here.
            logged = int(self.history[-1]["step"]) if self.history else 0
            self.window_losses = self.window_losses[: completed - logged]
            self.health.forget_after(completed)
            self.save(completed)
            raise
        finally:
            self.shown.close()
        self.finish(time.perf_counter() - self.t_start)

    def step(self, step: int, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step at learning rate ``lr``: (the mean loss over every process's micro-batches, the
        gradient norm before clipping), both left on the device."""
        tc, ddp = self.tc, self.ddp
        for group in self.opt.param_groups:
            group["lr"] = lr
        total = torch.zeros((), device=self.device)  # summed on the device: no host sync until a log line
        for i, micro in enumerate(self.my_micro):
            g = batch_generator(self.cfg.seed, self.cfg.finetune.data_offset + step, micro)  # a fine-tune continues
            x, y, mask = next_batch(self.corpus, "train", tc, g, step / tc.steps, self.device)
            positions = batch_positions(tc, g, self.device)
            # DDP all-reduces (averages) gradients on the last micro-step only.
            sync = ddp.no_sync() if ddp is not None and i < len(self.my_micro) - 1 else nullcontext()
            with sync:
                if self.graphs:  # a new replay reuses the last one's memory (one micro-batch a step: compile_problem)
                    torch.compiler.cudagraph_mark_step_begin()
                with self.ctx:
                    logits = self.fwd(x) if positions is None else self.fwd(x, positions)
                loss = loss_of(logits, y, mask) / len(self.my_micro)
                loss.backward()
            total += loss.detach()
        # The norm is computed either way (max_norm=inf scales by 1): a non-finite one means divergence.
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                   tc.grad_clip if tc.grad_clip > 0 else float("inf"))
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        reduced = mean_across(self.world, total) if self.world.size > 1 else total  # the same on every rank
        return reduced, grad_norm

    def log(self, done: int, lr: float, is_last: bool) -> None:
        """A train.csv row for the steps since the last one (validation loss every train.val_interval steps)."""
        tc = self.tc
        self.health.check()
        self.window_losses = [float(v) for v in self.window_losses]  # the one host sync per log interval
        now = time.perf_counter()
        tps = len(self.window_losses) * self.tokens_per_step / max(now - self.t_log, 1e-9)
        row = {"step": done, "loss": round(float(np.mean(self.window_losses)), 5), "lr": f"{lr:.3e}",
               "tokens_per_s": round(tps), "val_loss": "",
               "elapsed_s": round(self.elapsed_before + now - self.t_start, 2)}
        if self.world.is_main and (done % tc.val_interval == 0 or is_last):
            row["val_loss"] = round(validation_loss(self.model, self.corpus, tc, self.device), 5)
        self.history.append(row)
        if self.world.is_main:
            write_csv(self.run_dir.train_csv, self.history, TRAIN_COLUMNS)
            self.tracker.log(done, {"train/loss": row["loss"], "train/lr": lr, "train/tokens_per_s": tps,
                                    **({"val/loss": row["val_loss"]} if row["val_loss"] != "" else {})})
        self.shown.postfix(row["loss"], lr, tps)
        self.window_losses, self.t_log = [], time.perf_counter()

    def save(self, at: int) -> None:
        self.health.check()  # never save weights that a non-finite step produced
        if self.world.is_main:
            cfg = self.cfg
            atomic_save({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": at,
                         "config": to_dict(cfg), "identity": checkpoint_identity(cfg),
                         "data": getattr(self.corpus, "fingerprint", None), "vocab_size": self.corpus.vocab_size,
                         "log_window": [float(v) for v in self.window_losses]}, self.run_dir.checkpoint)
            self.run_dir.retire_analyses()  # an analysis made while the run trained is of weights it no longer has
            self.run_dir.update_meta(checkpoint_step=at)

    def finish(self, seconds: float) -> None:
        """The run's training figures in meta.json."""
        if self.world.is_main:
            h = self.history
            self.run_dir.update_meta(train_seconds=round(self.elapsed_before + seconds, 2),
                                     train_tokens_per_s=round(_mean_tps(h)),
                                     final_train_loss=h[-1]["loss"], final_val_loss=h[-1]["val_loss"],
                                     n_params=self.model.num_params(),
                                     tokens_seen=self.tc.steps * self.tokens_per_step)


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
    state = dict(ckpt["model"])
    try:  # eval-time options may add what the weights lack (NoPE's head_scale): the scheme fills it in
        model.scheme.inherit(state, "scheme.", cfg.finetune.new_positions)
    except ValueError as e:
        raise ConfigError(f"{run.path.name}: {e}") from None
    model.load_state_dict(state)
    return model.eval(), int(ckpt["step"])
