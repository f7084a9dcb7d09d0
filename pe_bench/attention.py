"""Causal attention: SDPA ``is_causal`` when the scheme adds no bias (flash kernels), SDPA with an additive float mask
when it adds a bias (outside autograd at long lengths one block of query rows at a time), and an explicit
softmax(q·k/√d + terms + mask) when its logits depend on q or k."""

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


# Outside autograd, a bias mask larger than this is never built whole: attention goes one block of query rows at a
# time (BiasRows), each against its causal prefix of keys (bytes; the rows per block follow from H and T).
MASK_BUDGET = 4 * 2**20


class BiasRows:
    """A score bias built one block of query rows at a time: rows [i, j) against keys [0, j), the causal prefix
    (positions increase along the sequence). ``score_bias`` is a function of each (query, key) position pair, so a
    block's bias is the same numbers as those rows of the whole one. ``full()``: the whole mask (1, H, T, T)."""

    def __init__(self, scheme, positions: torch.Tensor, layer: int, rows: int) -> None:
        self.scheme, self.positions, self.layer, self.rows = scheme, positions, layer, max(1, rows)

    def blocks(self):
        """(i, j, mask (1, H, j − i, j)) for each block of query rows."""
        T = self.positions.shape[0]
        for i in range(0, T, self.rows):
            j = min(T, i + self.rows)
            q_pos, k_pos = self.positions[i:j], self.positions[:j]
            yield i, j, causal_bias_mask(self.scheme.score_bias(q_pos, k_pos, self.layer), q_pos, k_pos)

    def full(self) -> torch.Tensor:
        p = self.positions
        return causal_bias_mask(self.scheme.score_bias(p, p, self.layer), p, p)


def attend_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: BiasRows) -> torch.Tensor:
    """q, k, v: (B, H, T, D) -> (B, H, T, D): :func:`attend` one block of query rows at a time (BiasRows), so that
    the mask of one block, not of all T × T pairs, is in memory; it also skips every block's future keys."""
    out = torch.empty_like(q)
    for i, j, mask in bias.blocks():
        out[:, :, i:j] = attend(q[:, :, i:j], k[:, :, :j], v[:, :, :j], mask)
    return out


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
