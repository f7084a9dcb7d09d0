"""Several processes for one run (DDP), and stopping a run cleanly on a signal.

DDP is started by ``torchrun`` (or a Slurm launcher with several tasks), which sets RANK/WORLD_SIZE/LOCAL_RANK:

    torchrun --standalone --nproc_per_node=4 -m pe_bench train scheme=rope train.grad_accum=4

The W processes split the ``grad_accum`` micro-batches of each optimizer step between them (rank r takes micro-steps
r, r+W, …), so the global batch — and the trained model, up to float summation order — is the same as on one process:
the run keeps its name and its results stay comparable. ``train.grad_accum`` must be a multiple of W.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world_from_env(device: torch.device) -> World:
    """Join the process group torchrun (or Slurm via submitit) described in the environment; World() if alone."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return World(dist.get_rank(), dist.get_world_size())


def local_rank() -> int | None:
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None else None


def mean_across(world: World, value: torch.Tensor) -> torch.Tensor:
    """All-reduce mean of a tensor over the processes of a run (identity when alone)."""
    if world.size > 1:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= world.size
    return value


def any_across(world: World, flag: bool, device: torch.device) -> bool:
    """True on every process if it is true on any: all ranks must stop at the same step."""
    if world.size == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()


def shutdown(world: World) -> None:
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------------------------
# Stop requests: a signal (SIGTERM from `kill` or Slurm at the time limit, SIGUSR1/2 sent ahead of it) sets a flag;
# the trainer checks it between optimizer steps, saves a checkpoint and raises StopRequested; evaluation checks it
# between batches of windows (check_stop) and drops the unfinished evaluation. The same command (or the requeued Slurm
# job) resumes from there.
# ---------------------------------------------------------------------------------------------------------------
class StopRequested(Exception):
    """Training stopped at a step boundary on request; the checkpoint holds every completed step."""


_stop = threading.Event()


def request_stop(signum: int | None = None, frame: object = None) -> None:
    _stop.set()


def stop_requested() -> bool:
    return _stop.is_set()


def check_stop(where: str) -> None:
    """Raise StopRequested ("stopped <where>") if a stop was requested; evaluation calls it between batches."""
    if _stop.is_set():
        raise StopRequested(f"stopped {where}")


def clear_stop() -> None:
    _stop.clear()


def stop_on_signals(*signums: int) -> None:
    """Turn these signals into a stop request (main thread only)."""
    for s in signums or (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(s, request_stop)
