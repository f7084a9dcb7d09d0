"""Length-dependent attention temperature: Scalable-Softmax (SSMax, Nakanishi 2025, arXiv:2501.19399, eq. 2) —
softmax(s·ln n · z) over the n logits z a query sees — here for causal attention, where query position i sees
n = i + 1 keys. Llama 4's NoPE layers use a related but different length-dependent q scale (Hugging Face
``Llama4TextAttention``, attn_temperature_tuning with attn_scale 0.1 and floor_scale 8192):
q × (1 + 0.1·ln(1 + ⌊(i + 1)/8192⌋)), exactly 1 below position 8191 and then growing in steps with the number of
8192-token blocks, not s·ln n.
The scale multiplies q, so it scales q·k (the content logits); an additive score bias of another scheme composed
with it (``hybrid``) is not scaled.

s is one scalar per layer and head, learnt (SSMax), initialised to 1/ln L so that the scale is 1 at n = L;
``learned: false`` fixes it there: logits × ln n / ln L, the issue's form. On its own the scheme is NoPE plus the
temperature; with another scheme: ``scheme=hybrid 'scheme.parts=[{name: rope}, {name: ssmax}]'``.

Not relative: the scale depends on the query's absolute position. The training-free form for runs trained without
it (scale max(1, ln n / ln L), identity within L) is the evaluation option ``eval.logn=true``, for every scheme."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.schemes.base import ModelShape, Scheme, log_n


@dataclass
class SSMaxOptions:
    learned: bool = True  # s per layer and head, trained (SSMax); false: fixed at 1/ln L


class SSMax(Scheme):
    name = "ssmax"
    description = "attention temperature s·ln n at query position n (learned s per head; NoPE otherwise)"
    citation = "Nakanishi 2025, arXiv:2501.19399"
    acts_on = ("qk",)
    Options = SSMaxOptions
    style = ("#c71585", "4")

    def __init__(self, options: SSMaxOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        s = torch.full((shape.n_layers, shape.n_heads), 1.0 / math.log(max(shape.train_seq_len, 2)))
        self.s = nn.Parameter(s) if options.learned else None
        if not options.learned:
            self.register_buffer("s_fixed", s, persistent=False)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        s = (self.s if self.s is not None else self.s_fixed)[layer]  # (H,)
        scale = s[:, None] * log_n(positions)[None, :]  # (H, T)
        return q * scale[None, :, :, None].to(q.dtype), k
