"""Causal attention: SDPA ``is_causal`` when the scheme adds no bias (flash kernels), SDPA with an additive float mask
when it adds a bias, and an explicit softmax(q·k/√d + terms + mask) when its logits depend on q or k."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def causal_bias_mask(bias: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """bias: (H, Tq, Tk) -> (1, H, Tq, Tk) additive mask: the bias where k_pos <= q_pos, −inf elsewhere.
    Built once per forward pass and shared by every layer; broadcast over the batch, never expanded. A bias outside
    autograd is masked in place (``score_bias`` returns a tensor of its own), so the mask costs one (H, T, T)
    tensor, not two."""
    future = k_pos[None, :] > q_pos[:, None]
    if not bias.requires_grad and bias.is_contiguous() and bias._base is None:
        return bias.masked_fill_(future[None], float("-inf"))[None]
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


def attend_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                    terms: torch.Tensor | None, positions: torch.Tensor,
                    value_terms: Callable[[torch.Tensor], torch.Tensor | None],
                    probe: Callable[[torch.Tensor], None] | None = None) -> torch.Tensor:
    """Attention written out, for schemes whose logits depend on q or k beyond q·k (Shaw, Transformer-XL, CoPE), and
    for every scheme when a ``probe`` wants the attention weights (``pe-bench analyze``).

    q, k, v: (B, H, T, D); mask: (1, H, T, T) additive (bias + causal) or None for plain causal; terms: (B, H, T, T)
    extra logits or None; value_terms(probs) -> (B, H, T, D) or None, added to the output; probe(probs) sees the
    weights (B, H, T, T). Softmax in float32."""
    logits = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    if terms is not None:
        logits = logits + terms.float()
    if mask is None:
        future = positions[None, :] > positions[:, None]
        logits = logits.masked_fill(future, float("-inf"))
    else:
        logits = logits + mask.float()
    probs = logits.softmax(-1)
    if probe is not None:
        probe(probs)
    out = probs.to(v.dtype) @ v
    extra = value_terms(probs)
    return out if extra is None else out + extra.to(out.dtype)
