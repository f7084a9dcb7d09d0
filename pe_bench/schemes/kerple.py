"""KERPLE (Chi et al. 2022, §4.2): conditionally positive definite kernels as learned per-head distance biases.

- ``kerple_log``:   b_h(i, j) = −r1_h · ln(1 + r2_h · (i − j))
- ``kerple_power``: b_h(i, j) = −r1_h · (i − j)^r2_h, 0 < r2 <= 2 (ALiBi is r2 = 1 with r1 fixed)

r1, r2 are per head and per layer, as in the official gpt-neox code: initialised U(0, 2) for the log variant's r1
and the power variant's exponent, U(0, 1) for the other, and clamped to >= 1e-2 (and the exponent to <= 2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.schemes.base import ModelShape, Scheme, causal_distance

EPS = 1e-2


@dataclass
class KerpleOptions:
    per_layer: bool = True  # separate r1, r2 per layer (official code); False shares them across layers


class _Kerple(Scheme):
    acts_on = ("scores",)
    relative = True
    bias_per_layer = True
    Options = KerpleOptions
    r1_init = 1.0  # r1 ~ U(0, r1_init)
    r2_init = 1.0  # r2 ~ U(0, r2_init)

    def __init__(self, options: KerpleOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        n = shape.n_layers if options.per_layer else 1
        self.r1 = nn.Parameter(torch.rand(n, shape.n_heads) * self.r1_init)
        self.r2 = nn.Parameter(torch.rand(n, shape.n_heads) * self.r2_init)

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor:
        i = layer if self.options.per_layer else 0
        distance = causal_distance(q_pos, k_pos).float()[None]  # (1, Tq, Tk)
        return self.kernel(distance, self.r1[i].clamp(min=EPS)[:, None, None], self.r2[i][:, None, None])

    def kernel(self, distance: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class KerpleLog(_Kerple):
    name = "kerple_log"
    description = "learned per-head logarithmic distance bias −r1·ln(1 + r2·(i−j))"
    citation = "Chi et al. 2022, arXiv:2205.09921"
    r1_init = 2.0
    style = ("#1a7f37", "p")

    def kernel(self, distance: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
        return -r1 * torch.log1p(r2.clamp(min=EPS) * distance)


class KerplePower(_Kerple):
    name = "kerple_power"
    description = "learned per-head power distance bias −r1·(i−j)^r2, 0 < r2 <= 2"
    citation = "Chi et al. 2022, arXiv:2205.09921"
    r2_init = 2.0
    style = ("#7cb518", "H")

    def kernel(self, distance: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
        # d^r2 at d = 0 has an infinite-slope gradient in r2 (0 · ln 0); compute on d >= 1 and zero the diagonal.
        far = distance >= 1
        return -r1 * torch.where(far, distance.clamp(min=1) ** r2.clamp(EPS, 2.0), torch.zeros_like(distance))
