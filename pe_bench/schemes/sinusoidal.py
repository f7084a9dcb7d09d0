"""Sinusoidal absolute positions added once at the input (Vaswani et al. 2017, §3.5)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme


def sinusoid_table(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """PE(p, 2k) = sin(p / base^(2k/d)), PE(p, 2k+1) = cos(p / base^(2k/d)).  positions: (T,) -> (T, dim)."""
    k2 = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device)
    angles = positions.to(torch.float64)[:, None] / base ** (k2 / dim)[None, :]
    pe = torch.empty(positions.shape[0], dim, dtype=torch.float64, device=positions.device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return pe.float()


@dataclass
class SinusoidalOptions:
    base: float = ranged(10000.0, gt=1)
    # Multiplier on the table. None = 1/sqrt(d_model), the initial value of x-transformers' ScaledSinusoidalEmbedding,
    # which keeps the table on the scale of the (0.02-std, weight-tied) token embeddings. 0 would be scheme=nope.
    scale: float | None = ranged(None, gt=0, hint="null = 1/sqrt(d_model)")


class Sinusoidal(Scheme):
    name = "sinusoidal"
    description = "fixed sin/cos absolute positions added to the token embeddings"
    citation = "Vaswani et al. 2017, arXiv:1706.03762"
    acts_on = ("input",)
    Options = SinusoidalOptions
    hf_architecture = "gpt2"  # pe-bench export (pe_bench.pretrained.export)
    style = ("#12a4c4", "h")

    def __init__(self, options: SinusoidalOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.scale = options.scale if options.scale is not None else 1.0 / math.sqrt(shape.d_model)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        pe = sinusoid_table(positions, x.shape[-1], self.options.base)
        return x + self.scale * pe.to(x.dtype)
