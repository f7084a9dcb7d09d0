"""Polar coordinate position embedding (PoPE; Gopalakrishnan, Csordás, Schmidhuber & Mozer 2025, arXiv:2509.10534,
eq. 3–6): each of the d entries of q and k becomes one complex number whose magnitude is the content and whose phase
is the position alone — μ = softplus(x_c), phase t·θ_c with d frequencies θ_c = b^(−c/d), c = 0..d−1 — so

    a_ts = Re[q̃_tᴴ k̃_s] = Σ_c softplus(q_tc)·softplus(k_sc)·cos((s − t)·θ_c + δ_c),

with no term that mixes content and phase (RoPE rotates pairs whose own angle is content). δ_c is a learnt phase
bias of the keys, per layer, head and frequency, initialised to 0 and clamped to [−2π, 0] (the paper's full PoPE;
``phase_bias: false`` leaves it out). Written as real vectors of 2d entries (μ·cos, μ·sin) per frequency, so any
attention backend computes the score; q carries a factor √2 so that the backends' 1/√(2d) is the paper's 1/√d."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme


@dataclass
class PoPEOptions:
    base: float = ranged(10000.0, gt=1)  # θ_c = base^(−c/d), d frequencies per head
    phase_bias: bool = True  # the learnt key phase bias δ_c ∈ [−2π, 0] (eq. 6); false: eq. 5


def pope_frequencies(head_dim: int, base: float) -> torch.Tensor:
    """θ_c = base^(−c/d), c = 0..d−1: (d,) float64 (one frequency per entry, twice RoPE's d/2)."""
    return base ** (-torch.arange(head_dim, dtype=torch.float64) / head_dim)


class PoPE(Scheme):
    name = "pope"
    description = "q, k as complex numbers: softplus magnitudes (content) and phases t·θ_c (position) apart"
    citation = "Gopalakrishnan et al. 2025, arXiv:2509.10534"
    acts_on = ("qk",)
    relative = True
    Options = PoPEOptions
    style = ("#b8860b", "h")

    def __init__(self, options: PoPEOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.register_buffer("theta", pope_frequencies(shape.head_dim, options.base), persistent=False)
        self.delta = (nn.Parameter(torch.zeros(shape.n_layers, shape.n_heads, shape.head_dim))
                      if options.phase_bias else None)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k: (B, H, T, d) -> (B, H, T, 2d): (μ cos φ, μ sin φ) for each entry, φ = t·θ_c (+ δ_c for keys)."""
        angles = (positions.to(torch.float64)[:, None] * self.theta[None, :]).float()  # (T, d)
        key_angles = angles if self.delta is None else angles + self.delta[layer].clamp(-2 * math.pi, 0)[:, None]

        def polar(x: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
            mu = F.softplus(x.float())
            return torch.cat([mu * phase.cos(), mu * phase.sin()], dim=-1).to(x.dtype)

        return polar(q, angles) * math.sqrt(2), polar(k, key_angles)
