"""xPos (Sun et al. 2023, "A Length-Extrapolatable Transformer", eq. 9–11): RoPE whose rotated pairs are also scaled,
queries by ζ_k^(m/γ) and keys by ζ_k^(−n/γ), so that q_m·k_n picks up ζ_k^((m−n)/γ), an exponential decay with
distance. ζ_k = (2k/d + γ_ζ)/(1 + γ_ζ), γ_ζ = 0.4, scale base γ = 512.

Stability: the exponents are taken relative to the middle of the current positions (as the reference code centres
them at len/2), so neither factor overflows at long lengths; the product, and so attention, is unchanged."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme
from pe_bench.schemes.rope import LAYOUTS, apply_rotary, require_even_head_dim, rope_angles


@dataclass
class XPosOptions:
    base: float = ranged(10000.0, gt=1)
    gamma: float = ranged(0.4, gt=0)  # γ_ζ in ζ_k = (2k/d + γ_ζ) / (1 + γ_ζ); 0 would make ζ_0 = 0
    scale_base: float = ranged(512.0, gt=0)  # γ: the decay is ζ_k per scale_base positions of distance
    layout: str = "half"  # the head dimension must be even, as for rope

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"scheme.layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")


def xpos_zeta(rot_dim: int, gamma: float = 0.4) -> torch.Tensor:
    """ζ_k = (2k/d + γ)/(1 + γ), k = 0..d/2−1 (the code's (arange(0, d, 2) + 0.4·d) / (1.4·d)): (d/2,) float64."""
    return (torch.arange(0, rot_dim, 2, dtype=torch.float64) + gamma * rot_dim) / ((1 + gamma) * rot_dim)


class XPos(Scheme):
    name = "xpos"
    description = "RoPE plus an exponential decay ζ^((m−n)/512) of q·k with distance (length-extrapolatable)"
    citation = "Sun et al. 2023, arXiv:2212.10554"
    acts_on = ("qk",)
    relative = True
    Options = XPosOptions
    style = ("#800000", "X")

    def __init__(self, options: XPosOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        require_even_head_dim(self.name, shape)
        self.rot_dim = shape.head_dim

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        angles = rope_angles(positions, self.rot_dim, self.options.base)
        zeta = xpos_zeta(self.rot_dim, self.options.gamma).to(positions.device)
        centre = (positions.min() + positions.max()).to(torch.float64) / 2
        power = (positions.to(torch.float64) - centre)[:, None] / self.options.scale_base  # (T, 1)
        scale = zeta[None, :] ** power  # (T, d/2): ζ^((m − c)/γ)
        layout = self.options.layout
        return (apply_rotary(q, angles, layout, scale.float()),
                apply_rotary(k, angles, layout, (1.0 / scale).float()))
