"""The Forgetting Transformer (FoX; Lin et al. 2025, arXiv:2503.02130, eq. 3–5): a forget gate per head and token,
f_t = σ(w_h·x_t + b_h), down-weights the past in proportion to what was forgotten in between — the logit of
query i and key j gets D_ij = Σ_{l=j+1..i} ln f_l. A data-dependent ALiBi: with a constant gate it is ALiBi with
slope −ln f. No other positional signal (the paper's FoX without RoPE). x is the layer's normalised attention
input; the gate's bias is initialised to 5 (f ≈ 0.993), as in the reference; per layer, like its attention.

Computed as D_ij = c_i − c_j with c_t = Σ_{l<=t} ln f_l (a cumulative sum in float32). Shift-invariant in positions
(it reads none)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, RowBias, Scheme, lean_inference


@dataclass
class FoxOptions:
    gate_bias_init: float = ranged(5.0, hint="the forget gate's initial logit: σ(5) ≈ 0.993")


class Fox(Scheme):
    name = "fox"
    description = "forget gates σ(w·x_t + b) per head; logit bias Σ ln f between key and query (data-dependent)"
    citation = "Lin et al. 2025, arXiv:2503.02130"
    acts_on = ("scores",)
    relative = True
    Options = FoxOptions
    style = ("#bfef45", "2")

    def __init__(self, options: FoxOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.gates = nn.ModuleList(nn.Linear(shape.d_model, shape.n_heads) for _ in range(shape.n_layers))
        with torch.no_grad():
            for g in self.gates:
                nn.init.normal_(g.weight, 0.0, 0.02)
                g.bias.fill_(options.gate_bias_init)

    def input_bias(self, x: torch.Tensor, layer: int) -> torch.Tensor | ForgetBias:
        log_f = F.logsigmoid(self.gates[layer](x).float())  # (B, T, H): ln f_t
        c = log_f.cumsum(1).transpose(1, 2)  # (B, H, T): Σ_{l<=t} ln f_l
        bias = ForgetBias(c)
        return bias if lean_inference() else bias.full()


class ForgetBias(RowBias):
    """D_ij = c_i − c_j = Σ_{l=j+1..i} ln f_l for j <= i, from c: (B, H, T), one block of query rows at a time."""

    def __init__(self, c: torch.Tensor) -> None:
        self.c = c

    def block(self, i: int, j: int) -> torch.Tensor:
        return self.c[..., i:j, None] - self.c[..., None, :j]

    def full(self) -> torch.Tensor:
        return self.block(0, self.c.shape[-1])
