"""Causal attention behind one function: SDPA ``is_causal`` when the scheme adds no bias (flash kernels), SDPA with an
additive float mask when it does."""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def causal_bias_mask(bias: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """bias: (H, Tq, Tk) -> (1, H, Tq, Tk) additive mask: the bias where k_pos <= q_pos, −inf elsewhere.
    Built once per forward pass and shared by every layer; broadcast over the batch, never expanded."""
    future = k_pos[None, :] > q_pos[:, None]
    return bias.masked_fill(future[None], float("-inf"))[None]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q, k, v: (B, H, T, D); mask: (1, H, T, T) additive, or None for plain causal. -> (B, H, T, D)."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # On CUDA keep the bias off cuDNN: it misreads an fp32 mask under bf16 q and gives NaN grads when T % 128 == 64
    # (pytorch #191612, #196678). The mask is cast to q's dtype for the same reason.
    ctx = sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]) if q.is_cuda else nullcontext()
    with ctx:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))
