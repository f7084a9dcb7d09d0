"""Stick-breaking attention (Tan et al. 2024, "Scaling Stick-Breaking Attention", arXiv:2410.17980, eq. 1–3): the
softmax replaced by a stick broken from the nearest key outwards — β_ij = σ(z_ij) and

    A_ij = β_ij · Π_{j<k<i} (1 − β_ik),   j < i,

so the nearest keys claim their share first and farther ones get what is left (a recency bias without any
positional encoding: the paper uses none). The weights of a row sum to at most 1; the unassigned rest goes to the
query's own value, o_i = Σ_j A_ij v_j + (1 − Σ_j A_ij) v_i, as the authors' code and tests run it
(shawntan/stickbreaking-attention: the kernel returns the rest, the model adds ``rem · v``); it is put on the
diagonal of the weights here. ``remainder: false`` leaves the rest unassigned (then the first query of a sequence
attends to nothing): runs made before the option existed are read with it. ``attend_current: true`` lets a query
attend to its own key too (the product then runs over j < k <= i). Computed in log space: ln A_ij = ln σ(z_ij) +
Σ_{k>j} ln σ(−z_ik) over the row's visible keys (a reversed cumulative sum), in float32.

The scheme replaces the normalisation (the ``attention_weights`` hook), so it runs on the explicit path: SDPA and
FlexAttention compute a softmax of their own."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pe_bench.schemes.base import Scheme, lean_inference


@dataclass
class StickBreakingOptions:
    attend_current: bool = False  # the paper's A_ij for j < i only; true: a query attends to its own key as well
    remainder: bool = True  # the row's unassigned weight 1 − Σ_j A_ij goes to the query's own value (the authors' code)


class StickBreaking(Scheme):
    name = "stickbreaking"
    description = "softmax replaced by stick-breaking σ(z_ij)·Π_{j<k<i}(1 − σ(z_ik)); no positional encoding"
    citation = "Tan et al. 2024, arXiv:2410.17980"
    acts_on = ("scores",)
    relative = True
    Options = StickBreakingOptions
    legacy_options = {"remainder": False}
    style = ("#556b2f", "3")

    def attention_weights(self, logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                          layer: int) -> torch.Tensor:
        if lean_inference():
            return self._weights_in_place(logits, q_pos, k_pos)
        if not self.options.attend_current:
            logits = logits.masked_fill(k_pos[None, :] >= q_pos[:, None], float("-inf"))
        # masked keys: ln σ(−∞) = −∞ (no weight of their own), ln σ(+∞) = 0 (they break nothing)
        log_rest = F.logsigmoid(-logits)
        after = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest  # Σ_{k>j} ln(1 − β_ik)
        weights = (F.logsigmoid(logits) + after).exp()
        if self.options.remainder:
            own = (k_pos[None, :] == q_pos[:, None]).to(weights.dtype)  # (Tq, Tk): the query's own key
            weights = weights + (1 - weights.sum(-1, keepdim=True)) * own
        return weights

    def _weights_in_place(self, logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The same weights outside autograd (logits: (B, H, Tq, Tk), overwritten): in place where nothing keeps the
        inputs, ln σ(z) as z + ln σ(−z) (one transcendental a pair instead of two), and e^x as 2^(x·log₂e) — the CPU's
        exp is about ten times slower where many arguments underflow (the far keys of a long row), exp2 is not. The
        weights equal the autograd path's to about 1e-6 relative (tested to 1e-5)."""
        if not self.options.attend_current:
            logits.masked_fill_(k_pos[None, :] >= q_pos[:, None], float("-inf"))
        log_rest = F.logsigmoid(-logits)
        after = log_rest.flip(-1).cumsum(-1).flip(-1).sub_(log_rest)  # Σ_{k>j} ln(1 − β_ik)
        weights = logits.add_(log_rest).add_(after).mul_(LOG2E).exp2_()  # exp(ln σ(z_ij) + after)
        if self.options.remainder:
            rows, cols = (k_pos[None, :] == q_pos[:, None]).nonzero(as_tuple=True)  # each query's own key
            weights[..., rows, cols] += 1 - weights.sum(-1)[..., rows]
        return weights


LOG2E = 1.4426950408889634  # log₂ e: e^x = 2^(x·log₂ e)
