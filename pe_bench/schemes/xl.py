"""Transformer-XL relative attention (Dai et al. 2019, §3.3, eq. for A^rel):

    A_ij = q_i·k_j + q_i·W_R R_{i−j} + u·k_j + v·W_R R_{i−j}     (all / √d)

R is the sinusoidal table of distances (d_model wide), W_R a per-layer projection to the heads, u and v learned
global (shared by the layers) per-head vectors. No segment recurrence: one window at a time, like every scheme here."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme, causal_distance
from pe_bench.schemes.sinusoidal import sinusoid_table


@dataclass
class XLOptions:
    base: float = ranged(10000.0, gt=1)
    init_std: float = ranged(0.02, gt=0)


class TransformerXL(Scheme):
    name = "xl"
    description = "Transformer-XL four-term relative attention: sinusoidal R_{i−j}, per-layer W_R, global u and v"
    citation = "Dai et al. 2019, arXiv:1901.02860"
    acts_on = ("scores",)
    relative = True
    Options = XLOptions

    def __init__(self, options: XLOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        H, D = shape.n_heads, shape.head_dim
        self.r_proj = nn.Parameter(torch.randn(shape.n_layers, shape.d_model, H * D) * options.init_std)
        self.u = nn.Parameter(torch.randn(H, D) * options.init_std)
        self.v = nn.Parameter(torch.randn(H, D) * options.init_std)

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, layer: int) -> torch.Tensor:
        B, H, T, D = q.shape
        distance = causal_distance(positions, positions)  # (T, T)
        n = int(distance.max()) + 1
        R = sinusoid_table(torch.arange(n, device=q.device), self.shape.d_model, self.options.base)  # (n, C)
        r = (R.to(q.dtype) @ self.r_proj[layer].to(q.dtype)).view(n, H, D).transpose(0, 1)  # (H, n, D): W_R R
        content_bias = torch.einsum("hd,bhtd->bht", self.u.to(q.dtype), k)[:, :, None, :]  # (B, H, 1, T): u·k_j
        by_distance = (q + self.v.to(q.dtype)[None, :, None, :]) @ r.transpose(-1, -2)  # (B, H, T, n)
        position_terms = by_distance.gather(-1, distance.expand(B, H, T, T))  # (q_i + v)·W_R R_{i−j}
        return (content_bias + position_terms) * D**-0.5
