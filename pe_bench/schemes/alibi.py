"""ALiBi (Press et al. 2022, eq. in §3): softmax(q_i·K^T/√d − m_h·(i − j)), head-specific fixed slopes m_h and no
positional embedding at the input. The bias is added after the 1/√d scaling.

Two variants as options (x-transformers): ``learned_slopes`` trains the slopes (kept positive, initialised to the
paper's), ``heads=n`` applies ALiBi to the first n heads only (slopes for n heads) and leaves the others without
positional signal."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme


def alibi_slopes(n_heads: int) -> list[float]:
    """Slopes exactly as the official code: geometric 2^(-8h/H) for H a power of two; otherwise the slopes for the
    closest power of two c below H, followed by every other slope of 2c, to fill the remaining H − c heads."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(n_heads).is_integer():
        return power_of_two(n_heads)
    c = 2 ** math.floor(math.log2(n_heads))
    return power_of_two(c) + power_of_two(2 * c)[0::2][: n_heads - c]


@dataclass
class ALiBiOptions:
    learned_slopes: bool = False  # train the slopes (as log-slopes, so they stay positive)
    # ALiBi on the first `heads` heads only (at most model.n_heads); None = every head
    heads: int | None = ranged(None, ge=1, hint="null = every head")


class ALiBi(Scheme):
    name = "alibi"
    description = "fixed per-head linear distance penalty −m_h·(i−j) on the attention logits"
    citation = "Press et al. 2022, arXiv:2108.12409"
    acts_on = ("scores",)
    relative = True
    Options = ALiBiOptions
    style = ("#e6194b", "v")

    def __init__(self, options: ALiBiOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        n = options.heads or shape.n_heads
        if n > shape.n_heads:
            raise ValueError(f"scheme.heads={n} exceeds model.n_heads={shape.n_heads}; use at most "
                             f"{shape.n_heads}, or null for every head")
        slopes = torch.zeros(shape.n_heads)
        slopes[:n] = torch.tensor(alibi_slopes(n))
        if options.learned_slopes:
            self.log_slopes = nn.Parameter(slopes[:n].log())
        else:
            self.register_buffer("slopes", slopes, persistent=False)

    def head_slopes(self) -> torch.Tensor:
        """(H,) slopes; 0 for heads without ALiBi."""
        if not self.options.learned_slopes:
            return self.slopes
        pad = self.shape.n_heads - self.log_slopes.shape[0]
        return torch.cat([self.log_slopes.exp(), self.log_slopes.new_zeros(pad)])

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (Tq, Tk), i − j
        return -self.head_slopes()[:, None, None] * distance[None]
