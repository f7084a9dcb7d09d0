"""Per-token negative log-likelihood, the one quantity every perplexity protocol sums."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_nll(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
              positions: torch.Tensor | None = None) -> torch.Tensor:
    """x, y: (B, T) inputs and targets -> (B, T) float32 nll of each target. A model with its own ``token_nll(x, y)``
    (a pretrained LM, pe_bench.pretrained: logits by chunks of positions, so memory does not grow with vocabulary ×
    window) computes it itself; any other from its logits (B, T, V)."""
    own = getattr(model, "token_nll", None)
    if own is not None:
        return own(x, y).float()
    logits = model(x, positions)
    return F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none")
