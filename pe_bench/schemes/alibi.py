"""ALiBi (Press et al. 2022, eq. in §3): softmax(q_i·K^T/√d − m_h·(i − j)), head-specific fixed slopes m_h and no
positional embedding at the input. The bias is added after the 1/√d scaling."""

from __future__ import annotations

import math

import torch

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


class ALiBi(Scheme):
    name = "alibi"
    description = "fixed per-head linear distance penalty −m_h·(i−j) on the attention logits"
    citation = "Press et al. 2022, arXiv:2108.12409"
    acts_on = ("scores",)
    relative = True

    def __init__(self, options: object, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(shape.n_heads)), persistent=False)

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (Tq, Tk), i − j
        return -self.slopes[:, None, None] * distance[None]
