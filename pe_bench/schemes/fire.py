"""FIRE (Li et al. 2024, "Functional Interpolation for Relative Positions Improves Long Context Transformers",
eq. 4–6): b_h(i, j) = f_θ(ψ(i − j) / ψ(max(L, i))), ψ(x) = ln(c·x + 1), f_θ an MLP 1 → 32 → H (ReLU).

"Progressive interpolation": distances are normalised by the query position (once past the threshold L), so every
query sees inputs in [0, 1] at any length. c and L are learned (L as a multiplier on its initial value, as in the
DAPE reference code). One FIRE module per layer, as in that code.

Not strictly relative: the normaliser depends on the query's absolute position i once i > L."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme, causal_distance, lean_inference


@dataclass
class FireOptions:
    mlp_width: int = ranged(32, ge=1)
    init_c: float = ranged(0.1, gt=0)
    # initial L; None = the training length (reference code: 512 = its L)
    init_threshold: float | None = ranged(None, gt=0, hint="null = the training length")
    eps: float = ranged(1e-6, gt=0)


HIDDEN_BUDGET = 2**20  # numbers of the MLP's hidden layer computed at once outside autograd (4 MiB in fp32)


class FireLayer(nn.Module):
    def __init__(self, n_heads: int, o: FireOptions, threshold: float) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, o.mlp_width), nn.ReLU(), nn.Linear(o.mlp_width, n_heads))
        self.c = nn.Parameter(torch.tensor(o.init_c))
        self.register_buffer("init_threshold", torch.tensor(float(threshold)))
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))
        self.eps = o.eps

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """-> (H, Tq, Tk). Outside autograd by blocks of query rows, so that the MLP's hidden layer (mlp_width
        numbers per pair) never holds more than HIDDEN_BUDGET of them."""
        rows = max(1, HIDDEN_BUDGET // max(1, k_pos.shape[0] * self.mlp[0].out_features))
        if not lean_inference() or rows >= q_pos.shape[0]:
            return self.bias(q_pos, k_pos)
        first = self.bias(q_pos[:rows], k_pos)  # its dtype (autocast's, if on) is the all-rows path's too
        out = first.new_empty(first.shape[0], q_pos.shape[0], k_pos.shape[0])
        out[:, :rows] = first
        for i in range(rows, q_pos.shape[0], rows):
            out[:, i:i + rows] = self.bias(q_pos[i:i + rows], k_pos)
        return out

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """-> (H, Tq, Tk), all rows at once."""
        distance = causal_distance(q_pos, k_pos).float()
        threshold = (self.threshold_multiplier * self.init_threshold).abs()
        normaliser = torch.maximum(q_pos.float(), threshold)[:, None]  # ψ(max(L, i))

        def psi(x: torch.Tensor) -> torch.Tensor:
            return torch.log(torch.abs(self.c * x) + 1)

        normalised = psi(distance) / (psi(normaliser) + self.eps)  # (Tq, Tk) in [0, 1]
        return self.mlp(normalised[..., None]).permute(2, 0, 1)


class Fire(Scheme):
    name = "fire"
    description = "MLP of log distance normalised by log query position (progressive interpolation), per layer"
    citation = "Li et al. 2024, arXiv:2310.04418"
    acts_on = ("scores",)
    bias_per_layer = True
    Options = FireOptions
    style = ("#d4a017", "o")

    def __init__(self, options: FireOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        threshold = options.init_threshold or shape.train_seq_len
        self.layers = nn.ModuleList(FireLayer(shape.n_heads, options, threshold) for _ in range(shape.n_layers))

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor:
        return self.layers[layer](q_pos, k_pos)

    def flex_problem(self) -> str | None:
        # Measured on an H100 (torch 2.11): the per-pair MLP in a score_mod failed to lower in the compiled kernels
        # (a matrix product in the forward; written out as mlp_width scalar terms, an assertion in the backward).
        return "its MLP per (query, key) pair does not compile into FlexAttention's kernels (torch 2.11, CUDA)"
