"""DAPE, data-adaptive positional encoding (Zheng et al. 2024, "DAPE: Data-Adaptive Positional Encoding for Length
Extrapolation", arXiv:2405.14722, eq. 5):

    A = softmax(q·k/√d + B + f(q·k/√d, B))

B a static relative bias (ALiBi by default; KERPLE, FIRE, ...), f an MLP applied at every (i, j) to the 2H numbers
of all heads' logits and biases there, giving H: Linear(2H → width), LeakyReLU, Linear(width → H), one per layer as in
the reference code. f sees the logits, so DAPE is a score-terms scheme (explicit attention); it looks at one
(i, j) at a time, so it stays causal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import REGISTRY, ModelShape, Scheme, lean_inference, same_values, values_of

BASES = ("alibi", "kerple_log", "kerple_power", "fire", "t5", "sandwich")


@dataclass
class DAPEOptions:
    base: str = "alibi"  # the static bias B: one of BASES, with its default options
    mlp_width: int = ranged(32, ge=1)

    def __post_init__(self) -> None:
        if self.base not in BASES:
            raise ValueError(f"scheme.base must be one of {', '.join(BASES)}, got {self.base!r}")


class DAPE(Scheme):
    name = "dape"
    description = "a static bias (ALiBi) plus a per-layer MLP of every head's logit and bias at each (i, j)"
    citation = "Zheng et al. 2024, arXiv:2405.14722"
    acts_on = ("scores",)
    relative = True  # with ALiBi; with FIRE (not relative) an instance says so
    Options = DAPEOptions
    style = ("#3cb44b", "1")

    def __init__(self, options: DAPEOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        cls = REGISTRY[options.base]
        self.base = cls(cls.Options(), shape)
        self.relative = cls.relative  # type: ignore[misc]
        H = shape.n_heads
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(2 * H, options.mlp_width), nn.LeakyReLU(), nn.Linear(options.mlp_width, H))
            for _ in range(shape.n_layers))
        self._kept: tuple | None = None  # (the values it was made from, the bias's half of the first layer)

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor:
        """B + f(q·k/√d, B): (B, H, Tq, Tk)."""
        logits = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5  # (B, H, Tq, Tk)
        if lean_inference():
            return self._terms_by_head_matrices(logits, self.base.score_bias(q_pos, k_pos, layer).float(), layer)
        bias = self.base.score_bias(q_pos, k_pos, layer).float()[None].expand_as(logits)
        features = torch.cat([logits, bias], 1).permute(0, 2, 3, 1)  # (B, Tq, Tk, 2H)
        return bias + self.mlps[layer](features).permute(0, 3, 1, 2)

    def _from_bias(self, bias: torch.Tensor, layer: int) -> torch.Tensor:
        """The bias's half of the MLP's first layer plus its bias, (Tq·Tk, width), for bias (H, Tq, Tk): kept for the
        next call with the same bias and weights (attention asks for the same rows once per chunk of sequences)."""
        first, H = self.mlps[layer][0], bias.shape[0]
        kept = self._kept
        if kept is not None and same_values(kept[0], (bias, first.weight, first.bias)):
            return kept[1]
        out = torch.addmm(first.bias, bias.permute(1, 2, 0).reshape(-1, H), first.weight[:, H:].t())
        self._kept = (values_of((bias, first.weight, first.bias)), out)
        return out

    def _terms_by_head_matrices(self, logits: torch.Tensor, bias: torch.Tensor, layer: int) -> torch.Tensor:
        """The same B + f(logits, B) with the MLP's first matrix split into its logit and bias halves (no
        (B, Tq, Tk, 2H) copy of the features), the bias's half once for the whole batch, and the products fused with
        their additions: logits (B, H, Tq, Tk), bias (H, Tq, Tk) -> (B, H, Tq, Tk). Evaluation only: training keeps
        the order of operations its committed runs were made with."""
        first, act, second = self.mlps[layer]
        B, H, Tq, Tk = logits.shape
        w_logit = first.weight[:, :H].t()  # (H, width)
        hidden = torch.baddbmm(self._from_bias(bias, layer).expand(B, -1, -1),
                               logits.permute(0, 2, 3, 1).reshape(B, -1, H), w_logit.expand(B, -1, -1))
        hidden = F.leaky_relu(hidden, act.negative_slope, inplace=True)  # (B, Tq·Tk, width)
        out = torch.addmm(second.bias, hidden.view(-1, hidden.shape[-1]), second.weight.t())  # (B·Tq·Tk, H)
        return out.view(B, Tq, Tk, H).permute(0, 3, 1, 2).add(bias[None])

    def inherit(self, state: dict[str, torch.Tensor], prefix: str, how: str) -> None:
        self.base.inherit(state, prefix + "base.", how)
