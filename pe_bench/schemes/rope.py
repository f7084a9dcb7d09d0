"""Rotary position embedding (Su et al. 2021, RoFormer eq. 34): rotate each (q, k) pair by p·θ_k, θ_k = b^(-2k/d),
so that q_m·k_n depends only on m − n."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pe_bench.schemes.base import ModelShape, Scheme

LAYOUTS = ("half", "interleaved")


@dataclass
class RoPEOptions:
    base: float = 10000.0
    layout: str = "half"  # "half": rotate_half pairs (i, i + d/2), NeoX/HF; "interleaved": pairs (2i, 2i+1), GPT-J
    rotary_fraction: float = 1.0  # partial rotary: rotate only the first fraction of each head's dims

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"scheme.layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if not 0.0 < self.rotary_fraction <= 1.0:
            raise ValueError(f"scheme.rotary_fraction must be in (0, 1], got {self.rotary_fraction}")


def rope_angles(positions: torch.Tensor, rot_dim: int, base: float) -> torch.Tensor:
    """positions: (T,) -> angles p·θ_k: (T, rot_dim/2), in float32."""
    inv_freq = base ** (-torch.arange(0, rot_dim, 2, dtype=torch.float64, device=positions.device) / rot_dim)
    return (positions.to(torch.float64)[:, None] * inv_freq[None, :]).float()


def apply_rotary(x: torch.Tensor, angles: torch.Tensor, layout: str) -> torch.Tensor:
    """x: (B, H, T, D), angles: (T, R/2) with R <= D even; rotates the first R dims of x, leaves the rest."""
    rot_dim = 2 * angles.shape[-1]
    xr, rest = x[..., :rot_dim].float(), x[..., rot_dim:]
    cos, sin = angles.cos(), angles.sin()
    if layout == "half":
        x1, x2 = xr[..., : rot_dim // 2], xr[..., rot_dim // 2 :]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return torch.cat([out.to(x.dtype), rest], dim=-1)


class RoPE(Scheme):
    name = "rope"
    description = "rotary embedding of q and k by position-dependent angles (relative by construction)"
    citation = "Su et al. 2021, arXiv:2104.09864"
    acts_on = ("qk",)
    relative = True
    Options = RoPEOptions

    def __init__(self, options: RoPEOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.rot_dim = int(shape.head_dim * options.rotary_fraction) // 2 * 2
        if self.rot_dim == 0:
            raise ValueError(f"scheme.rotary_fraction={options.rotary_fraction} rotates no dimension of a "
                             f"{shape.head_dim}-dim head; raise it")

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = rope_angles(positions, self.rot_dim, self.options.base)
        return apply_rotary(q, angles, self.options.layout), apply_rotary(k, angles, self.options.layout)
