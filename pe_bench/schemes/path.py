"""PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating Householder
Transformations", arXiv:2505.16381), as fla-org/flash-linear-attention defines it (``fla/layers/path_attn.py``, the
reference ``naive_path_attn``): each token t brings a Householder-like transform H_t = I − β_t w_t w_tᵀ, and the logit
of query i and key j <= i is

    s_ij = q_iᵀ (H_i H_{i−1} ⋯ H_{j+1}) k_j / √d        (no transform on the diagonal),

a position encoding computed from the data: w_t = l2norm(SiLU(conv₃(W_up W_down x_t))) per head (a rank-32
projection, a causal depthwise convolution of width 3), β_t = 2σ(W_β x_t + b) ∈ (0, 2) per head. No other
positional signal (the forget-gate variant, PaTH-FoX, is off as in the reference).

Under autograd (training) computed explicitly in O(T²·d) per head: u_i⁰ = q_i, u_iᵐ = H_{i−m+1} u_iᵐ⁻¹ (H is
symmetric), s_{i,i−m} = u_iᵐ·k_{i−m} — one step per distance, every query at once (``token_terms``: the logits minus
the plain q·k). Outside autograd by blocks of query rows (``PathRows``), as the official kernels do: the product of a
block's transforms in the UT/WY form H_a ⋯ H_{b−1} = I − Wᵀ U W (W: the block's w as rows, U upper triangular, one
triangular solve), the keys before the block carried through it, so no (B, H, T, T) tensor exists."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, RowBias, Scheme, lean_inference


@dataclass
class PaTHOptions:
    rank: int = ranged(32, ge=1)  # the low-rank projection that w is computed through (the reference's 32)
    conv_size: int = ranged(3, ge=1)  # the causal depthwise convolution's width (the reference's 3)


class Transforms(nn.Module):
    """One layer's w (B, H, T, d), unit norm per head, and β (B, H, T) in (0, 2), from the layer input x: (B, T, C)."""

    def __init__(self, shape: ModelShape, options: PaTHOptions) -> None:
        super().__init__()
        width = shape.n_heads * shape.head_dim
        self.heads, self.head_dim, self.conv_size = shape.n_heads, shape.head_dim, options.conv_size
        self.down = nn.Linear(shape.d_model, options.rank, bias=False)
        self.up = nn.Linear(options.rank, width, bias=False)
        self.conv = nn.Conv1d(width, width, options.conv_size, groups=width, bias=False)
        self.beta = nn.Linear(shape.d_model, shape.n_heads)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        h = self.up(self.down(x)).transpose(1, 2)  # (B, H·d, T)
        h = F.silu(self.conv(F.pad(h, (self.conv_size - 1, 0))))  # causal: position t sees t − 2 .. t
        w = h.view(B, self.heads, self.head_dim, T).transpose(2, 3).float()
        w = w / torch.sqrt(w.pow(2).sum(-1, keepdim=True) + 1e-6)
        return w, 2 * torch.sigmoid(self.beta(x).float()).transpose(1, 2)


def path_logits(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """q, k, w: (B, H, T, d), beta: (B, H, T) -> s_ij = q_iᵀ H_i ⋯ H_{j+1} k_j for j <= i, 0 above the diagonal:
    (B, H, T, T) float32, unscaled."""
    T = q.shape[2]
    u, k = q.float(), k.float()
    diagonals = [(u * k).sum(-1)]  # distance 0: (B, H, T)
    for m in range(1, T):
        u = u[:, :, 1:]  # the queries i = m .. T−1
        wt, bt = w[:, :, 1:T - m + 1], beta[:, :, 1:T - m + 1]  # H_t with t = i − m + 1
        u = u - (bt * (u * wt).sum(-1))[..., None] * wt
        diagonals.append(F.pad((u * k[:, :, :T - m]).sum(-1), (m, 0)))  # s_{i, i−m} at index i
    by_distance = torch.stack(diagonals, -1)  # (B, H, T, T): [.., i, m] = s_{i, i−m}
    i = torch.arange(T, device=q.device)
    distance = (i[:, None] - i[None, :]).clamp(min=0)
    out = by_distance.gather(-1, distance.expand(*q.shape[:2], T, T))
    return out.masked_fill(i[None, :] > i[:, None], 0.0)


class PaTH(Scheme):
    name = "path"
    description = "positions as accumulated data-dependent Householder transforms H_t = I − β_t w_t w_tᵀ of q·k"
    citation = "Yang et al. 2025, arXiv:2505.16381"
    acts_on = ("scores",)
    relative = True  # reads no position: the transforms come from the tokens between key and query
    Options = PaTHOptions
    style = ("#8b008b", "p")

    def __init__(self, options: PaTHOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.transforms = nn.ModuleList(Transforms(shape, options) for _ in range(shape.n_layers))

    def token_terms(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, layer: int) -> torch.Tensor | PathRows:
        """PaTH's logits minus the plain q·k, both scaled by 1/√d: (B, H, T, T), or by blocks of rows outside
        autograd (PathRows)."""
        w, beta = self.transforms[layer](x)
        if lean_inference():
            return PathRows(q, k, w, beta)
        plain = q.float() @ k.float().transpose(-1, -2)
        return (path_logits(q, k, w, beta) - plain) / math.sqrt(q.shape[-1])


def wy_factor(w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """w: (..., r, d) rows w_a … w_{a+r−1}, beta: (..., r) -> U: (..., r, r) upper triangular with
    H_a H_{a+1} ⋯ H_{a+r−1} = I − Wᵀ U W (the UT transform: U = (I + diag(β)·strictly_upper(W Wᵀ))⁻¹ diag(β)). Its
    leading (and any diagonal) block is the factor of that run of transforms alone."""
    r = w.shape[-2]
    upper = torch.ones(r, r, dtype=torch.bool, device=w.device).triu(1)
    system = torch.eye(r, dtype=w.dtype, device=w.device) + beta[..., :, None] * (w @ w.transpose(-1, -2)) * upper
    return torch.linalg.solve_triangular(system, torch.diag_embed(beta), upper=True, unitriangular=True)


class PathRows(RowBias):
    """PaTH's logits minus the plain q·k, scaled by 1/√d, by blocks of query rows: computed in chunks of PATH_ROWS
    rows taken in order (any block of rows is served from the chunks that hold it), every earlier
    key carried through the transforms up to the chunk's start (k̂_j = H_{a−1} ⋯ H_{j+1} k_j). For a chunk [a, b)
    with W its w, U = wy_factor, A = Q Wᵀ, K_W = K Wᵀ (masks: L[i, s] = s <= i, G[j, t] = t > j):

        within the chunk   s_ij = q_i·k_j − ((A∘L) (E∘G)ᵀ)_ij,   E = (K_W∘G) U
        earlier keys       s_ij = q̃_i·k̂_j,   q̃ = Q − (A∘L) Uᵀ W   (q̃_i = H_a ⋯ H_i q_i)
        carried on         k̂ ← k̂ − k̂ (Wᵀ U W),   the chunk's own keys K − (E∘G) W.

    Rows asked for before the last chunk start over from the first key."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> None:
        self.q, self.w, self.beta = q, w, beta.float()
        self.scale = q.shape[-1] ** -0.5
        # [k̂_j, −k_j] for every key: the earlier logits minus the plain q·k are one product [q̃, q]·[k̂, −k]; k̂ (the
        # first d columns) is carried on in place up to the current chunk's end
        self.pairs = torch.cat([k.float(), -k.float()], -1)
        self.chunk: tuple[int, int, torch.Tensor] | None = None  # (a, b, logits of rows [a, b) × keys [0, b))

    def block(self, i: int, j: int) -> torch.Tensor:
        """Rows [i, j) against keys [0, j): (B, H, j − i, j), a new tensor, 0 past the diagonal."""
        out = self.pairs.new_zeros(*self.q.shape[:-2], j - i, j)
        for a in [i, *range(i - i % PATH_ROWS + PATH_ROWS, j, PATH_ROWS)]:  # where each chunk's rows begin
            c0, c1, logits = self._chunk_of(a)
            end = min(j, c1)
            out[..., a - i:end - i, :end] = logits[..., a - c0:end - c0, :end]
        return out

    def full(self) -> torch.Tensor:
        return self.block(0, self.q.shape[-2])

    def _chunk_of(self, a: int) -> tuple[int, int, torch.Tensor]:
        """The chunk holding row ``a``, computed (from the first key again if it lies before the current one)."""
        start = a - a % PATH_ROWS
        if self.chunk is not None and self.chunk[0] == start:
            return self.chunk
        if self.chunk is not None and start < self.chunk[0]:
            self.chunk = None  # each step takes its own keys afresh from −k: starting over needs no reset
        at = 0 if self.chunk is None else self.chunk[1]
        while at <= start:
            end = min(self.q.shape[-2], at + PATH_ROWS)
            self.chunk = (at, end, self._step(at, end))
            at = end
        return self.chunk  # type: ignore[return-value]

    def _step(self, a: int, b: int) -> torch.Tensor:
        """Rows [a, b) against keys [0, b): (B, H, b − a, b); the carried keys move on to b."""
        d = self.q.shape[-1]
        # one chunk of the (B, H, T, d) views made contiguous: no whole copy, and none by each product
        q, w = (x[..., a:b, :].float().contiguous() for x in (self.q, self.w))
        k = -self.pairs[..., a:b, d:]
        u = wy_factor(w, self.beta[..., a:b])
        r = b - a
        lower = torch.ones(r, r, dtype=torch.bool, device=q.device).tril()
        later = ~lower  # G[j, t] = t > j
        wt = w.transpose(-1, -2)
        aw = (q @ wt).mul_(lower)  # A∘L
        e = ((k @ wt).mul_(later) @ u).mul_(later)  # E∘G
        within = (aw @ e.transpose(-1, -2)).masked_fill_(later, 0.0).neg_()  # s_ij − q_i·k_j
        q_tilde = q - (aw @ u.transpose(-1, -2)) @ w
        earlier = torch.cat([q_tilde, q], -1) @ self.pairs[..., :a, :].transpose(-1, -2)  # q̃·k̂ − q·k
        carried = self.pairs[..., :a, :d]
        carried -= carried @ (wt @ u @ w)  # k̂ ← k̂ (I − Wᵀ U W): one d × d product for every earlier key
        self.pairs[..., a:b, :d] = k - e @ w
        return torch.cat([earlier, within], -1).mul_(self.scale)


PATH_ROWS = 64  # query rows of one chunk of ``PathRows`` (the size of one UT transform)
