"""Shaw et al. 2018, "Self-Attention with Relative Position Representations", eq. 3–5:

    e_ij = q_i·(k_j + a^K_ij) / √d,    z_i = Σ_j α_ij (v_j + a^V_ij),    a_ij = w_clip(j−i, k)

with learned vectors per layer, shared by the heads. In a decoder j − i ranges over −k..0 after clipping, so each
layer holds the k + 1 rows a causal model can use (the paper's table has 2k + 1 for both directions)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme, causal_distance


@dataclass
class ShawOptions:
    # k: distances beyond it share the last vector (tensor2tensor max_relative_position)
    max_distance: int = ranged(20, ge=1)
    values: bool = True  # also add a^V to the values (eq. 3); False: keys only
    init_std: float = ranged(0.02, gt=0)


def shaw_index(q_pos: torch.Tensor, k_pos: torch.Tensor, max_distance: int) -> torch.Tensor:
    """Row of the table for each (i, j): clip(i − j, 0, k) (the causal half of clip(j − i, −k, k)). -> (Tq, Tk)."""
    return causal_distance(q_pos, k_pos).clamp(max=max_distance)


class Shaw(Scheme):
    name = "shaw"
    description = "learned vectors for clipped relative distances added to keys (and values), per layer"
    citation = "Shaw et al. 2018, arXiv:1803.02155"
    acts_on = ("scores",)
    relative = True
    Options = ShawOptions
    style = ("#f032e6", "*")

    def __init__(self, options: ShawOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        rows = (shape.n_layers, options.max_distance + 1, shape.head_dim)
        self.key_table = nn.Parameter(torch.randn(rows) * options.init_std)
        self.value_table = nn.Parameter(torch.randn(rows) * options.init_std) if options.values else None

    def _far(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> int:
        """How many leading keys are at distance ≥ k from every query (all in the last, shared row): a block of
        query rows against its causal prefix has most of its keys there. None under torch.compile (counting them
        would break the graph at every layer; clipping gives those keys the same row)."""
        if torch.compiler.is_compiling():
            return 0
        edge = q_pos.min() - self.options.max_distance
        far = int((k_pos <= edge).sum())
        return far if far and bool((k_pos[:far] <= edge).all()) else 0

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor:
        B, H, Tq, D = q.shape
        K, far = self.options.max_distance, self._far(q_pos, k_pos)
        idx = shaw_index(q_pos, k_pos[far:], K)
        by_row = (q @ self.key_table[layer].to(q.dtype).T) * D**-0.5  # (B, H, Tq, k+1): q_i·w_r / √d
        near = by_row.gather(-1, idx.expand(B, H, Tq, idx.shape[1]))
        if not far:
            return near
        return torch.cat([by_row[..., K:].expand(B, H, Tq, far), near], -1)  # far keys: the last row, w_k

    def value_terms(self, probs: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        if self.value_table is None:
            return None
        B, H, Tq, Tk = probs.shape
        K, far = self.options.max_distance, self._far(q_pos, k_pos)
        idx = shaw_index(q_pos, k_pos[far:], K).expand(B, H, Tq, Tk - far)
        mass = probs.new_zeros(B, H, Tq, K + 1).scatter_add_(-1, idx, probs[..., far:])  # Σ_j α_ij by row
        if far:
            mass[..., K] += probs[..., :far].sum(-1)
        return mass @ self.value_table[layer].to(probs.dtype)  # (B, H, Tq, D)

    def flex_problem(self) -> str | None:
        if self.value_table is not None:
            return "its value vectors a^V need the attention weights (scheme.values=false has a score_mod)"
        return None

    def score_mod(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, layer: int):
        """score + q_i·a^K_clip(i−j) / √d, gathered from q's products with the k + 1 rows: (B, H, T, k + 1)."""
        by_row = (q @ self.key_table[layer].to(q.dtype).T).float() * q.shape[-1] ** -0.5
        k_max = self.options.max_distance

        def mod(score, b, h, q_idx, kv_idx):
            return score + by_row[b, h, q_idx, (positions[q_idx] - positions[kv_idx]).clamp(0, k_max)]

        return mod
