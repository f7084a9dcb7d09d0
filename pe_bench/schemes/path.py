"""PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating Householder
Transformations", arXiv:2505.16381), as fla-org/flash-linear-attention defines it (``fla/layers/path_attn.py``, the
reference ``naive_path_attn``): each token t brings a Householder-like transform H_t = I − β_t w_t w_tᵀ, and the logit
of query i and key j <= i is

    s_ij = q_iᵀ (H_i H_{i−1} ⋯ H_{j+1}) k_j / √d        (no transform on the diagonal),

a position encoding computed from the data: w_t = l2norm(SiLU(conv₃(W_up W_down x_t))) per head (a rank-32
projection, a causal depthwise convolution of width 3), β_t = 2σ(W_β x_t + b) ∈ (0, 2) per head. No other
positional signal (the forget-gate variant, PaTH-FoX, is off as in the reference).

Computed explicitly in O(T²·d) per head: u_i⁰ = q_i, u_iᵐ = H_{i−m+1} u_iᵐ⁻¹ (H is symmetric), s_{i,i−m} = u_iᵐ·k_{i−m}
— one step per distance, every query at once (``token_terms``: the logits minus the plain q·k)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme


@dataclass
class PaTHOptions:
    rank: int = ranged(32, ge=1)  # the low-rank projection that w is computed through (the reference's 32)
    conv_size: int = ranged(3, ge=1)  # the causal depthwise convolution's width (the reference's 3)


class Transforms(nn.Module):
    """One layer's w (B, H, T, d), unit norm per head, and β (B, H, T) in (0, 2), from the layer input x: (B, T, C)."""

    def __init__(self, shape: ModelShape, options: PaTHOptions) -> None:
        super().__init__()
        width = shape.n_heads * shape.head_dim
        self.heads, self.head_dim, self.conv_size = shape.n_heads, shape.head_dim, options.conv_size
        self.down = nn.Linear(shape.d_model, options.rank, bias=False)
        self.up = nn.Linear(options.rank, width, bias=False)
        self.conv = nn.Conv1d(width, width, options.conv_size, groups=width, bias=False)
        self.beta = nn.Linear(shape.d_model, shape.n_heads)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        h = self.up(self.down(x)).transpose(1, 2)  # (B, H·d, T)
        h = F.silu(self.conv(F.pad(h, (self.conv_size - 1, 0))))  # causal: position t sees t − 2 .. t
        w = h.view(B, self.heads, self.head_dim, T).transpose(2, 3).float()
        w = w / torch.sqrt(w.pow(2).sum(-1, keepdim=True) + 1e-6)
        return w, 2 * torch.sigmoid(self.beta(x).float()).transpose(1, 2)


def path_logits(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """q, k, w: (B, H, T, d), beta: (B, H, T) -> s_ij = q_iᵀ H_i ⋯ H_{j+1} k_j for j <= i, 0 above the diagonal:
    (B, H, T, T) float32, unscaled."""
    T = q.shape[2]
    u, k = q.float(), k.float()
    diagonals = [(u * k).sum(-1)]  # distance 0: (B, H, T)
    for m in range(1, T):
        u = u[:, :, 1:]  # the queries i = m .. T−1
        wt, bt = w[:, :, 1:T - m + 1], beta[:, :, 1:T - m + 1]  # H_t with t = i − m + 1
        u = u - (bt * (u * wt).sum(-1))[..., None] * wt
        diagonals.append(F.pad((u * k[:, :, :T - m]).sum(-1), (m, 0)))  # s_{i, i−m} at index i
    by_distance = torch.stack(diagonals, -1)  # (B, H, T, T): [.., i, m] = s_{i, i−m}
    i = torch.arange(T, device=q.device)
    distance = (i[:, None] - i[None, :]).clamp(min=0)
    out = by_distance.gather(-1, distance.expand(*q.shape[:2], T, T))
    return out.masked_fill(i[None, :] > i[:, None], 0.0)


class PaTH(Scheme):
    name = "path"
    description = "positions as accumulated data-dependent Householder transforms H_t = I − β_t w_t w_tᵀ of q·k"
    citation = "Yang et al. 2025, arXiv:2505.16381"
    acts_on = ("scores",)
    relative = True  # reads no position: the transforms come from the tokens between key and query
    Options = PaTHOptions
    style = ("#8b008b", "p")

    def __init__(self, options: PaTHOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.transforms = nn.ModuleList(Transforms(shape, options) for _ in range(shape.n_layers))

    def token_terms(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, layer: int) -> torch.Tensor:
        """PaTH's logits minus the plain q·k, both scaled by 1/√d: (B, H, T, T)."""
        w, beta = self.transforms[layer](x)
        plain = q.float() @ k.float().transpose(-1, -2)
        return (path_logits(q, k, w, beta) - plain) / math.sqrt(q.shape[-1])
