"""Device and precision rules shared by the trainer and the evaluator."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

import torch

from pe_bench.config import TrainConfig, compile_problem
from pe_bench.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """auto → the GPU if there is one (under torchrun: this process's GPU, LOCAL_RANK), else the CPU."""
    local = os.environ.get("LOCAL_RANK")
    if name in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda", int(local) if local is not None else torch.cuda.current_device())
    if name == "auto":
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device={name} but no CUDA GPU is visible; use train.device=cpu (or auto)")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConfigError(f"train.device={name!r} is not a device; use auto, cpu, cuda or cuda:N") from None


def check_compile(tc: TrainConfig) -> None:
    """Refuse (ConfigError) a ``train.compile`` that cannot train on the device ``train.device`` resolves to here,
    with this process's torchrun world: what training would refuse, said before anything is created."""
    if tc.compile != "graphs":  # the only mode that depends on the device (and a device not here fails later)
        return
    problem = compile_problem(tc, resolve_device(tc.device).type, int(os.environ.get("WORLD_SIZE", "1")))
    if problem:
        raise ConfigError(problem)


def use_bf16(tc: TrainConfig, device: torch.device) -> bool:
    return tc.precision == "bf16" or (tc.precision == "auto" and device.type == "cuda")


def use_compile(tc: TrainConfig, device: torch.device) -> bool:
    return tc.compile in ("on", "graphs") or (tc.compile == "auto" and device.type == "cuda")


def compile_mode(tc: TrainConfig) -> str | None:
    """torch.compile's ``mode`` for the training forward: CUDA graphs (``reduce-overhead``: the launches of a whole
    forward and backward replayed as one graph, for models too small to keep the GPU busy) or torch's default."""
    return "reduce-overhead" if tc.compile == "graphs" else None


def autocast(tc: TrainConfig, device: torch.device) -> AbstractContextManager:
    """bf16 autocast where the config asks for it (auto: on CUDA), otherwise full precision."""
    return bf16_autocast(device, use_bf16(tc, device))


def bf16_autocast(device: torch.device, enabled: bool) -> AbstractContextManager:
    return torch.autocast(device.type, dtype=torch.bfloat16) if enabled else nullcontext()
