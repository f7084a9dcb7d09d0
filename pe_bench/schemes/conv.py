"""Convolutional positional encoding: a depthwise Conv1d over the sequence, added residually to the token
embeddings (the conditional positional encoding of Chu et al. 2021, CPE, in 1-D).

A decoder must pad on the left only: x_t sees x_{t−K+1..t}. The symmetric ("same") padding used in vision and in
many explainers lets position t see x_{t+1..t+K/2}, the very tokens it is asked to predict; the conformance test
catches that version. Positions are implicit (the zero padding marks the start), so nothing here depends on the
index: shift-invariant, and any length works."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme


@dataclass
class ConvOptions:
    # K >= 2: a kernel of 1 sees no other position (a per-channel scale, no positional signal)
    kernel_size: int = ranged(3, ge=2, hint="a kernel of 1 sees no other position")


class Conv(Scheme):
    name = "conv"
    description = "causal depthwise convolution over the token embeddings, added residually (implicit positions)"
    citation = "Chu et al. 2021, arXiv:2102.10882 (CPE)"
    acts_on = ("input",)
    relative = True
    Options = ConvOptions
    style = ("#f781bf", "^")

    def __init__(self, options: ConvOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.conv = nn.Conv1d(shape.d_model, shape.d_model, options.kernel_size, groups=shape.d_model, bias=False)

    def padding(self) -> tuple[int, int]:
        """(left, right) zero padding of the time axis: causal, K − 1 on the left."""
        return self.options.kernel_size - 1, 0

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = F.pad(x.transpose(1, 2), self.padding())  # (B, C, T + K − 1)
        return x + self.conv(h).transpose(1, 2)
