"""Stick-breaking attention (Tan et al. 2024, "Scaling Stick-Breaking Attention", arXiv:2410.17980, eq. 1–3): the
softmax replaced by a stick broken from the nearest key outwards — β_ij = σ(z_ij) and

    A_ij = β_ij · Π_{j<k<i} (1 − β_ik),   j < i,

so the nearest keys claim their share first and farther ones get what is left (a recency bias without any
positional encoding: the paper uses none). The weights of a row sum to at most 1; the rest is not assigned (as in
the paper's reference code, which returns it apart). ``attend_current: true`` lets a query attend to its own key
too (the product then runs over j < k <= i). Computed in log space: ln A_ij = ln σ(z_ij) + Σ_{k>j} ln σ(−z_ik)
over the row's visible keys (a reversed cumulative sum), in float32.

The scheme replaces the normalisation (the ``attention_weights`` hook), so it runs on the explicit path: SDPA and
FlexAttention compute a softmax of their own."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pe_bench.schemes.base import Scheme


@dataclass
class StickBreakingOptions:
    attend_current: bool = False  # the paper's A_ij for j < i only; true: a query attends to its own key as well


class StickBreaking(Scheme):
    name = "stickbreaking"
    description = "softmax replaced by stick-breaking σ(z_ij)·Π_{j<k<i}(1 − σ(z_ik)); no positional encoding"
    citation = "Tan et al. 2024, arXiv:2410.17980"
    acts_on = ("scores",)
    relative = True
    Options = StickBreakingOptions
    style = ("#556b2f", "3")

    def attention_weights(self, logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                          layer: int) -> torch.Tensor:
        if not self.options.attend_current:
            logits = logits.masked_fill(k_pos[None, :] >= q_pos[:, None], float("-inf"))
        # masked keys: ln σ(−∞) = −∞ (no weight of their own), ln σ(+∞) = 0 (they break nothing)
        log_rest = F.logsigmoid(-logits)
        after = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest  # Σ_{k>j} ln(1 − β_ik)
        return (F.logsigmoid(logits) + after).exp()
