"""Fourier position embedding (FoPE; Hua et al., ICML 2025, arXiv:2412.17739, §4), as its authors' code computes it
(TsinghuaC3I/Fourier-Position-Embedding, ``FourierEmbedding``): RoPE's frequencies ω_j = b^(−2j/d), with the
under-trained ones — a period longer than the training length, ω_j < 2π/L — zeroed and dropped, leaving K; each of
the first K' = min(K, d/4) rotated pairs of a head then carries a Fourier series over the K kept frequencies,

    C_t,m = Σ_k cos(ω_k·t)·a_h,k,m,    S_t,m = Σ_k sin(ω_k·t)·b_h,k,m,

and x ↦ x ⊙ [C, C] + rotate_half(x) ⊙ [S, S] for q and k alike. The other d/2 − K' pairs are padded with C = S = 1: a
fixed, position-free transform (the zero frequency). The coefficients a, b are fixed, drawn per layer and head at
initialisation as a Xavier-normal draw of gain σ plus the code's step identity (``eye_xavier_norm`` with
``get_step_eye``, σ = 0.3 for the paper's 60M model) and kept with the weights. The step identity has, with
step = ⌈K/K'⌉, a 1 at (i·step, i) for every column i with i·step < K: the identity when K = K'; when K > K', pair i
starts on kept frequency i·step, and a column with i·step >= K starts from the draw alone. With coefficients off the
identity the score is RoPE's plus cross-frequency terms, not a function of the distance alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme
from pe_bench.schemes.rope import inv_freq, require_even_head_dim


@dataclass
class FoPEOptions:
    base: float = ranged(10000.0, gt=1)
    sigma: float = ranged(0.3, ge=0)  # the Xavier gain of the coefficients' random part (0: RoPE without ω < 2π/L)


def kept_frequencies(head_dim: int, base: float, L: int) -> torch.Tensor:
    """RoPE's ω_j = b^(−2j/d) that complete a period within L (ω >= 2π/L), highest first: (K,) float64."""
    omega = inv_freq(head_dim, base)
    return omega[omega >= 2 * math.pi / L]


def step_identity(k_in: int, k_out: int) -> torch.Tensor:
    """(K, K') float32: the authors' identity-like start (``get_step_eye``): with step = ⌈K/K'⌉, a 1 at (i·step, i)
    for each column i with i·step < K, 0 elsewhere; the identity when K = K'."""
    eye = torch.zeros(k_in, k_out)
    if k_in * k_out == 0:
        return eye
    step = -(-k_in // k_out)
    cols = torch.arange(k_out)
    cols = cols[cols * step < k_in]
    eye[cols * step, cols] = 1.0
    return eye


def fourier_coefficients(layers: int, heads: int, k_in: int, k_out: int, sigma: float) -> torch.Tensor:
    """(layers, heads, K, K') float32: the step identity plus a Xavier-normal draw of gain σ per layer (torch's fans
    of an (H, K, K') tensor: fan_in = K·K', fan_out = H·K'), from the global generator (the run's seed)."""
    if k_in * k_out == 0:
        return torch.zeros(layers, heads, k_in, k_out)
    eye = step_identity(k_in, k_out)
    std = sigma * math.sqrt(2.0 / (k_in * k_out + heads * k_out))
    return torch.stack([eye + std * torch.randn(heads, k_in, k_out) for _ in range(layers)])


class FoPE(Scheme):
    name = "fope"
    description = "RoPE whose pairs carry Fourier series over the kept frequencies; periods longer than L zeroed"
    citation = "Hua et al. 2025, arXiv:2412.17739"
    acts_on = ("qk",)
    relative = False  # cross-frequency terms: the score is not a function of i − j alone
    Options = FoPEOptions
    style = ("#2f4f4f", "d")

    def __init__(self, options: FoPEOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        require_even_head_dim(self.name, shape)
        # the length the weights were first trained at: a fine-tune keeps its parent's frequencies and coefficients
        omega = kept_frequencies(shape.head_dim, options.base, shape.pretrained_length)
        k_out = min(len(omega), shape.head_dim // 4)
        self.register_buffer("omega", omega, persistent=False)
        self.register_buffer("cos_coef", fourier_coefficients(shape.n_layers, shape.n_heads, len(omega), k_out,
                                                              options.sigma))
        self.register_buffer("sin_coef", fourier_coefficients(shape.n_layers, shape.n_heads, len(omega), k_out,
                                                              options.sigma))
        self.cos_coef: torch.Tensor
        self.sin_coef: torch.Tensor

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k: (B, H, T, d) -> the same shapes: x ⊙ [C, C] + rotate_half(x) ⊙ [S, S], C and S (H, T, d/2)."""
        angles = (positions.to(torch.float64)[:, None] * self.omega[None, :]).float()  # (T, K)
        C = torch.einsum("tk,hkm->htm", angles.cos(), self.cos_coef[layer])
        S = torch.einsum("tk,hkm->htm", angles.sin(), self.sin_coef[layer])
        pad = self.shape.head_dim // 2 - C.shape[-1]
        C, S = (torch.nn.functional.pad(x, (0, pad), value=1.0) for x in (C, S))
        cos, sin = torch.cat([C, C], -1), torch.cat([S, S], -1)  # (H, T, d)

        def apply(x: torch.Tensor) -> torch.Tensor:
            half = x.shape[-1] // 2
            turned = torch.cat([-x[..., half:], x[..., :half]], -1)
            return (x.float() * cos + turned.float() * sin).to(x.dtype)

        return apply(q), apply(k)
