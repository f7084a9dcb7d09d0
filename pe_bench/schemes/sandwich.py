"""Sandwich (Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the Lens of Receptive Field
Analysis", §5): a parameter-free bias from the inner product of sinusoidal embeddings, p_i·p_j − p_i·p_i, which
depends only on i − j, compressed per head:

    b_h(i, j) = (Σ_{k=1}^{d'/2} cos((i − j) / 10000^(2k/d')) − d'/2) / (compression · h / H),  h = 1..H

(NeMo's implementation; d' = ``dim``, the model width by default)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pe_bench.ranges import ranged
from pe_bench.schemes.base import Scheme, causal_distance, distance_span


@dataclass
class SandwichOptions:
    dim: int | None = ranged(None, ge=2, hint="null = d_model")  # d' of the sinusoidal embeddings (even)
    base: float = ranged(10000.0, gt=1)
    compression: float = ranged(8.0, gt=0)  # head h divides the bias by compression·h/H

    def __post_init__(self) -> None:
        if self.dim is not None and self.dim % 2:
            raise ValueError(f"scheme.dim={self.dim} must be even (d'/2 sin/cos pairs); use {self.dim + 1}")


def sandwich_bias(distance: torch.Tensor, dim: int, n_heads: int, base: float = 10000.0,
                  compression: float = 8.0, span: int | None = None) -> torch.Tensor:
    """distance: (Tq, Tk) of i − j >= 0 -> (H, Tq, Tk). Computed once per distance 0..span−1 (default: up to the
    largest in ``distance``), then gathered."""
    k = torch.arange(1, dim // 2 + 1, dtype=torch.float64, device=distance.device)
    inv = base ** (-2 * k / dim)
    d = torch.arange(span or int(distance.max()) + 1, dtype=torch.float64, device=distance.device)
    per_distance = torch.cos(d[:, None] * inv).sum(-1) - dim / 2  # (n,), <= 0
    heads = torch.arange(1, n_heads + 1, dtype=torch.float64, device=distance.device)
    table = (per_distance[None] / (compression * heads / n_heads)[:, None]).float()  # (H, n)
    return table[:, distance]


class Sandwich(Scheme):
    name = "sandwich"
    description = "parameter-free bias from inner products of sinusoidal embeddings, compressed per head"
    citation = "Chi et al. 2023, arXiv:2212.10356"
    acts_on = ("scores",)
    relative = True
    Options = SandwichOptions
    style = ("#469990", "d")

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor:
        o = self.options
        distance = causal_distance(q_pos, k_pos)
        return sandwich_bias(distance, o.dim or self.shape.d_model, self.shape.n_heads, o.base, o.compression,
                             distance_span(distance, self.shape))
