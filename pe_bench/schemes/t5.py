"""T5 relative position bias (Raffel et al. 2020, §2.1): a learned scalar per head and distance bucket, shared by all
layers. Causal bucketing: exact buckets for distances < num_buckets/2, then logarithmic up to max_distance."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme


def t5_bucket(distance: torch.Tensor, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Causal bucket of n = max(i − j, 0): n for n < nb/2, else nb/2 + ⌊ln(n/(nb/2)) / ln(max_d/(nb/2)) · nb/2⌋,
    capped at nb − 1.  With the defaults: 20→17, 32→21, 64→26, 100→30, ≥127→31."""
    n = distance.clamp(min=0)
    max_exact = num_buckets // 2
    log_ratio = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return torch.where(n < max_exact, n, large)


@dataclass
class T5Options:
    num_buckets: int = ranged(32, ge=2)
    max_distance: int = ranged(128, ge=2)  # and > num_buckets // 2 (where the logarithmic buckets start)
    # T5 adds its bias to unscaled q·k; here logits are q·k/√d. x-transformers multiplies the bias by √d_head to
    # compensate (which, under Adam, also gives the table a √d larger effective step). null = √d_head; 1.0 = plain.
    scale: float | None = ranged(None, gt=0, hint="null = sqrt(head_dim)")

    def __post_init__(self) -> None:
        if self.max_distance <= self.num_buckets // 2:
            raise ValueError(f"scheme.max_distance={self.max_distance} must exceed scheme.num_buckets // 2 = "
                             f"{self.num_buckets // 2} (the exact buckets); raise it or lower scheme.num_buckets")


class T5Bias(Scheme):
    name = "t5"
    description = "learned per-head bias for log-bucketed relative distances, shared across layers"
    citation = "Raffel et al. 2020, arXiv:1910.10683"
    acts_on = ("scores",)
    relative = True
    Options = T5Options
    style = ("#f58231", "<")

    def __init__(self, options: T5Options, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.table = nn.Parameter(torch.zeros(shape.n_heads, options.num_buckets))  # starts as NoPE
        self.scale = options.scale if options.scale is not None else math.sqrt(shape.head_dim)

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor:
        buckets = t5_bucket(q_pos[:, None] - k_pos[None, :], self.options.num_buckets, self.options.max_distance)
        return self.scale * self.table[:, buckets]  # (H, Tq, Tk)
