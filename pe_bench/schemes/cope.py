"""CoPE, contextual position encoding (Golovneva et al. 2024, §3 and App. B): positions counted by gates,

    g_ij = σ(q_i·k_j / √d),   p_ij = Σ_{t=j}^{i} g_it  (clipped to p_max − 1),   logit_ij += q_i·e[p_ij]

with e[p] linearly interpolated between the integer rows e[⌊p⌋] and e[⌈p⌉]; computed, as in the paper's code, by
gathering q_i·e[k] for integer k. One table e (p_max × d, zeros) per layer, shared by the heads. No use of the
token index at all: positions are what the gates count."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme, lean_inference


@dataclass
class CoPEOptions:
    max_position: int = ranged(16, ge=2)  # p_max: rows of e; contextual positions are clipped to p_max − 1


class CoPE(Scheme):
    name = "cope"
    description = "contextual positions: cumulative sigmoid gates count which keys matter; interpolated embeddings"
    citation = "Golovneva et al. 2024, arXiv:2405.18719"
    acts_on = ("scores",)
    relative = True
    Options = CoPEOptions
    style = ("#911eb4", "8")

    def __init__(self, options: CoPEOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.pos_emb = nn.Parameter(torch.zeros(shape.n_layers, shape.head_dim, options.max_position))

    def flex_problem(self) -> str | None:
        return "its positions are sums of gates over the other keys of the row, not a function of one score"

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor:
        future = k_pos[None, :] > q_pos[:, None]
        logits = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
        if lean_inference():  # the same numbers, in place: a few (B, H, Tq, Tk) tensors fewer
            pos = logits.sigmoid_().masked_fill_(future, 0.0).flip(-1).cumsum_(-1).flip(-1)
            pos.clamp_(max=self.options.max_position - 1)  # Σ_{t >= j} g_it
            by_row = (q @ self.pos_emb[layer].to(q.dtype)).float()  # (B, H, Tq, p_max): q_i·e[p]
            at_upper = by_row.gather(-1, pos.ceil().long())
            lower = pos.floor()
            at_lower = by_row.gather(-1, lower.long())
            w = pos.sub_(lower)
            del lower
            at_upper.mul_(w)
            return at_upper.add_(at_lower.mul_(w.neg_().add_(1)))
        gates = torch.sigmoid(logits).masked_fill(future, 0.0)
        pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.options.max_position - 1)  # Σ_{t >= j} g_it
        lower = pos.floor()
        w = pos - lower
        # In this order: autograd sums the gradients of q and by_row in the order of the operations, and the
        # committed CoPE runs were trained with it (another order changes the low bits, then a 1000-step run).
        by_row = (q @ self.pos_emb[layer].to(q.dtype)).float()  # (B, H, Tq, p_max): q_i·e[p]
        at_lower = by_row.gather(-1, lower.long())
        at_upper = by_row.gather(-1, pos.ceil().long())
        return at_upper * w + at_lower * (1 - w)
