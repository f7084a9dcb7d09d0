"""A scheme per layer, by a repeating pattern: layer l uses ``parts[pattern[l mod len(pattern)]]``.

The default is RoPE on three layers of four and NoPE on every fourth (layers 3, 7, …): SmolLM3's
``no_rope_layer_interval=4`` and the RNoPE architecture of Yang et al. 2025 ("Rope to Nope and back again: a new
hybrid attention strategy", arXiv:2501.18795, §4), also Llama 4's interleaved NoPE layers (whose query temperature
is a separate option). Any schemes that act on q/k or on the scores can be interleaved
(``scheme.parts=[{name: rope}, {name: alibi}] scheme.pattern=[0,1]``); a part acting on the input embedding is
refused, since the input is embedded once, before every layer. Each hook of a layer is its part's, called with the
layer's index (``rotate`` and the score hooks take it), so per-layer parts (KERPLE, FIRE, Shaw) keep their
per-layer parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from pe_bench.ranges import ranged
from pe_bench.schemes.base import ModelShape, Scheme, options_label
from pe_bench.schemes.hybrid import Composite, build_parts, check_part_names


def acts_on_input(scheme: Scheme) -> bool:
    """Whether the scheme (or any part of a composite) changes the input embedding."""
    if isinstance(scheme, Composite):
        return any(acts_on_input(p) for p in scheme.parts)
    return type(scheme).embed is not Scheme.embed


@dataclass
class LayeredOptions:
    # The schemes layers choose from: {name: <scheme>, <option>: <value>, ...}, as hybrid's parts.
    parts: list[dict[str, Any]] = field(default_factory=lambda: [{"name": "rope"}, {"name": "nope"}])
    # Layer l uses parts[pattern[l % len(pattern)]]: [0, 0, 0, 1] = NoPE on every fourth layer (SmolLM3).
    pattern: list[int] = ranged(default_factory=lambda: [0, 0, 0, 1], ge=0, nonempty=True)

    def __post_init__(self) -> None:
        check_part_names(self.parts, "layered")
        bad = [i for i in self.pattern if i >= len(self.parts)]
        if bad:
            raise ValueError(f"scheme.pattern has {bad[0]}, but scheme.parts has {len(self.parts)} schemes "
                             f"(indices 0..{len(self.parts) - 1}); fix the index or add a part")


class Layered(Composite):
    name = "layered"
    description = "a scheme per layer by a repeating pattern: RoPE on 3 layers of 4, NoPE on every 4th (SmolLM3)"
    citation = "Yang et al. 2025, arXiv:2501.18795 (RNoPE); SmolLM3 (no_rope_layer_interval=4)"
    acts_on = ("qk", "scores")
    relative = True  # of the default parts; an instance says what its parts are
    Options = LayeredOptions
    style = ("#42d4f4", "x")

    def __init__(self, options: LayeredOptions, shape: ModelShape) -> None:
        parts = build_parts(options.parts, shape)
        for i, p in enumerate(parts):
            if acts_on_input(p):
                raise ValueError(f"scheme.parts[{i}] ({p.name}) acts on the input embedding, which is computed "
                                 "once before all layers: a per-layer pattern cannot hold it; combine it with "
                                 "scheme=hybrid instead")
        super().__init__(options, shape, parts)
        self.relative = all(p.relative for p in parts)  # type: ignore[misc]
        self.bias_per_layer = True  # type: ignore[misc]  # layers may differ even when no part is per-layer

    def part(self, layer: int) -> Scheme:
        """The scheme of ``layer``."""
        pattern = self.options.pattern
        return self.parts[pattern[layer % len(pattern)]]

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return self.part(layer).rotate(q, k, positions, layer)

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor | None:
        return self.part(layer).score_bias(q_pos, k_pos, layer)

    def attention_weights(self, logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                          layer: int) -> torch.Tensor | None:
        return self.part(layer).attention_weights(logits, q_pos, k_pos, layer)

    def input_bias(self, x: torch.Tensor, layer: int) -> torch.Tensor | None:
        return self.part(layer).input_bias(x, layer)

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        return self.part(layer).score_terms(q, k, q_pos, k_pos, layer)

    def value_terms(self, probs: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        return self.part(layer).value_terms(probs, q_pos, k_pos, layer)

    def score_mod(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, layer: int):
        return self.part(layer).score_mod(q, k, positions, layer)

    def label(self) -> str:
        """``layered`` with its defaults; otherwise the layers' schemes in pattern order, e.g. ``rope/alibi``."""
        if self.options.parts == LayeredOptions().parts and self.options.pattern == LayeredOptions().pattern:
            return self.name
        return "/".join(options_label(self.parts[i].name, self.parts[i].options) for i in self.options.pattern)
