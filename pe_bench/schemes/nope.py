"""NoPE: no positional signal at all; the causal mask alone supplies order (Kazemnejad et al. 2023).

``head_scale`` adds the per-head attention temperature of Wang et al. 2024 (arXiv:2404.12224, §4, "head-based
scale"): softmax(λ_{l,h} · q·k/√d) with one λ per layer and head, initialised to ``head_scale``. NoPE fails past L
as its attention spreads over more keys ("distraction"); a scale λ > 1 sharpens it again. The paper's two uses:
- the uniform scale, training-free: every λ = head_scale on a run trained without it (an eval-time option:
  ``nope[head_scale=1.6]`` rows of a plain NoPE run);
- HeadScale: the λ alone fine-tuned at the longer length, the rest frozen (``pe-bench finetune RUN_DIR
  scheme.head_scale=1.6 finetune.trainable=scheme train=headscale``; ``sweep=headscale`` runs both).
A λ multiplies q, so the scale acts on the content logits: the scheme stays relative (shift-invariant)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme


@dataclass
class NoPEOptions:
    # null: plain NoPE; a value: λ per layer and head, starting there (Wang et al. 2024 start HeadScale at the uniform
    # scale found for the target length, e.g. 1.6 from 2k to 8k tokens)
    head_scale: float | None = ranged(None, gt=0, hint="null = no scale")


class NoPE(Scheme):
    name = "nope"
    description = "no positional encoding; causal masking is the only source of order (optional per-head scale)"
    citation = "Kazemnejad et al. 2023, arXiv:2305.19466; head scale: Wang et al. 2024, arXiv:2404.12224"
    acts_on = ()
    relative = True
    Options = NoPEOptions
    hf_architecture = "gpt_neox"  # pe-bench export (pe_bench.pretrained.export)
    eval_options = ("head_scale",)
    late_options = ("head_scale",)
    style = ("#000000", "o")

    def __init__(self, options: NoPEOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.scale = None
        if options.head_scale is not None:
            self.scale = nn.Parameter(self._uniform())
            # the value the λ started from, saved with them: a run's learnt λ belong to its own head_scale only
            self.register_buffer("scale_start", torch.tensor(float(options.head_scale)))

    def _uniform(self) -> torch.Tensor:
        """(n_layers, n_heads), every λ = head_scale."""
        return torch.full((self.shape.n_layers, self.shape.n_heads), float(self.options.head_scale))

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k: (B, H, T, D) -> (λ_{layer,h} · q, k)."""
        if self.scale is None:
            return q, k
        return q * self.scale[layer][None, :, None, None].to(q.dtype), k

    def inherit(self, state: dict[str, torch.Tensor], prefix: str, how: str) -> None:
        """Weights without λ start at this run's uniform scale (the training-free rows, HeadScale's first step);
        learnt λ are kept, and refused when they started from another head_scale (or this run has none)."""
        key, start = prefix + "scale", prefix + "scale_start"
        if key in state and (self.scale is None or float(state[start]) != self.options.head_scale):
            raise ValueError(f"the weights hold head scales learnt from scheme.head_scale={float(state[start]):g}; "
                             f"evaluate or fine-tune them with that value (not {self.options.head_scale})")
        if self.scale is not None and key not in state:
            state[key], state[start] = self._uniform(), torch.tensor(float(self.options.head_scale))
