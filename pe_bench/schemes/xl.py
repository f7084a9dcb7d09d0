"""Transformer-XL relative attention (Dai et al. 2019, §3.3, eq. for A^rel):

    A_ij = q_i·k_j + q_i·W_R R_{i−j} + u·k_j + v·W_R R_{i−j}     (all / √d)

R is the sinusoidal table of distances (d_model wide), W_R a per-layer projection to the heads, u and v learned
global (shared by the layers) per-head vectors. No segment recurrence: one window at a time, like every scheme here."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import (ModelShape, Scheme, causal_distance, distance_span, lean_inference, position_span,
                                   same_values, values_of)
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
    style = ("#000075", ">")

    def __init__(self, options: XLOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        H, D = shape.n_heads, shape.head_dim
        self.r_proj = nn.Parameter(torch.randn(shape.n_layers, shape.d_model, H * D) * options.init_std)
        self.u = nn.Parameter(torch.randn(H, D) * options.init_std)
        self.v = nn.Parameter(torch.randn(H, D) * options.init_std)

    def _projected(self, n: int, layer: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """W_R R_r for distances r < n: (H, n, D). Outside autograd attention asks for it block after block of
        query rows: the last layer's table is kept (rows for a power of two ≥ n distances; row r does not depend
        on n) while W_R holds the same values."""
        H, D = self.shape.n_heads, self.shape.head_dim

        def table(m: int) -> torch.Tensor:
            R = sinusoid_table(torch.arange(m, device=device), self.shape.d_model, self.options.base)  # (m, C)
            return (R.to(dtype) @ self.r_proj[layer].to(dtype)).view(m, H, D).transpose(0, 1)

        if not lean_inference():
            return table(n)
        key = (layer, dtype, device)
        kept = getattr(self, "_kept", None)  # (key, W_R's values, table)
        if kept is None or kept[0] != key or kept[2].shape[1] < n or not same_values(kept[1], (self.r_proj[layer],)):
            kept = (key, values_of((self.r_proj[layer],)), table(1 << (n - 1).bit_length()))
            self._kept = kept
        return kept[2][:, :n]

    def _relative(self, q: torch.Tensor, k: torch.Tensor, n: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """-> u·k_j: (B, H, Tk) and (q_i + v)·W_R R_r for distances r < n: (B, H, Tq, n), both unscaled."""
        r = self._projected(n, layer, q.dtype, q.device)  # (H, n, D)
        qv = q + self.v.to(q.dtype)[None, :, None, :]
        if not lean_inference():
            content_bias = torch.einsum("hd,bhtd->bht", self.u.to(q.dtype), k)  # u·k_j
            return content_bias, qv @ r.transpose(-1, -2)  # (B, H, Tq, n)
        # The same products without copying k or r per block of query rows: u as a column, the batch folded into the
        # rows of one product per head.
        B, H, Tq, D = q.shape
        content_bias = (k @ self.u.to(q.dtype)[:, :, None]).squeeze(-1)
        by_distance = qv.transpose(0, 1).reshape(H, B * Tq, D) @ r.transpose(-1, -2)  # (H, B·Tq, n)
        return content_bias, by_distance.view(H, B, Tq, -1).transpose(0, 1)

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor:
        B, H, Tq, D = q.shape
        distance = causal_distance(q_pos, k_pos)  # (Tq, Tk)
        content_bias, by_distance = self._relative(q, k, distance_span(distance, self.shape), layer)
        position_terms = by_distance.gather(-1, distance.expand(B, H, Tq, k_pos.shape[0]))  # (q_i + v)·W_R R_{i−j}
        return (content_bias[:, :, None, :] + position_terms) * D**-0.5

    def score_mod(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, layer: int):
        """score + (u·k_j + (q_i + v)·W_R R_{i−j}) / √d from the captured (B, H, T) and (B, H, T, n) products."""
        n = position_span(positions)
        content_bias, by_distance = self._relative(q, k, n, layer)
        content_bias, by_distance = content_bias.float(), by_distance.float()
        scale = q.shape[-1] ** -0.5

        def mod(score, b, h, q_idx, kv_idx):
            d = (positions[q_idx] - positions[kv_idx]).clamp(0, n - 1)
            return score + (content_bias[b, h, kv_idx] + by_distance[b, h, q_idx, d]) * scale

        return mod
