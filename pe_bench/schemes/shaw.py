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

    def __init__(self, options: ShawOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        rows = (shape.n_layers, options.max_distance + 1, shape.head_dim)
        self.key_table = nn.Parameter(torch.randn(rows) * options.init_std)
        self.value_table = nn.Parameter(torch.randn(rows) * options.init_std) if options.values else None

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor:
        B, H, Tq, D = q.shape
        idx = shaw_index(q_pos, k_pos, self.options.max_distance)
        by_row = (q @ self.key_table[layer].to(q.dtype).T) * D**-0.5  # (B, H, Tq, k+1): q_i·w_r / √d
        return by_row.gather(-1, idx.expand(B, H, Tq, k_pos.shape[0]))

    def value_terms(self, probs: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        if self.value_table is None:
            return None
        B, H, Tq, Tk = probs.shape
        idx = shaw_index(q_pos, k_pos, self.options.max_distance).expand(B, H, Tq, Tk)
        mass = probs.new_zeros(B, H, Tq, self.options.max_distance + 1).scatter_add_(-1, idx, probs)  # Σ_j by row
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
