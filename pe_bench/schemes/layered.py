"""A scheme per layer, by a repeating pattern: layer l uses ``parts[pattern[l mod len(pattern)]]``.

The default is RoPE on three layers of four and NoPE on every fourth (layers 3, 7, …): SmolLM3's
``no_rope_layer_interval=4`` and the RNoPE architecture of Yang et al. 2025 ("Rope to Nope and back again: a new
hybrid attention strategy", arXiv:2501.18795, §4), also Llama 4's interleaved NoPE layers (without their q scale
1 + 0.1·ln(1 + ⌊(i + 1)/8192⌋), which no scheme here reproduces; ``ssmax``'s s·ln n is a related but different
one). Any schemes that act on q/k or on the scores can be interleaved
(``scheme.parts=[{name: rope}, {name: alibi}] scheme.pattern=[0,1]``); a part acting on the input embedding is
refused, since the input is embedded once, before every layer. Each hook of a layer is its part's, called with the
layer's index (``rotate`` and the score hooks take it), so per-layer parts (KERPLE, FIRE, Shaw) keep their
per-layer parameters.

Local attention (``window`` w): the layers of the ``local_parts`` see only keys at i − j < w (a sliding window, as
SWAN-GPT's RoPE layers, Puvvada et al. 2025, and the sliding-window RoPE layers of Yang et al. 2025, §5), or with
``chunked`` only the keys of their own chunk of w tokens, ⌊i/w⌋ = ⌊j/w⌋ (Llama 4's iRoPE local layers); the other
layers stay global. The window is a −∞ bias added to the part's own.
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
    window: int | None = ranged(None, ge=1, hint="null = every layer global")  # local attention of local_parts
    local_parts: list[int] = ranged(default_factory=lambda: [0], ge=0)  # the parts whose layers attend locally
    chunked: bool = False  # local layers attend within fixed chunks of `window` tokens instead of a sliding window

    def __post_init__(self) -> None:
        check_part_names(self.parts, "layered")
        bad_local = [i for i in self.local_parts if i >= len(self.parts)]
        if bad_local:
            raise ValueError(f"scheme.local_parts has {bad_local[0]}, but scheme.parts has {len(self.parts)} schemes "
                             f"(indices 0..{len(self.parts) - 1}); fix the index")
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
    late_options = ("window", "local_parts", "chunked")

    def __init__(self, options: LayeredOptions, shape: ModelShape) -> None:
        if options.chunked and not options.window:
            raise ValueError("scheme.chunked=true splits the local layers' keys into chunks of scheme.window tokens: "
                             "set scheme.window too (e.g. scheme.window=16)")
        parts = build_parts(options.parts, shape)
        for i, p in enumerate(parts):
            if acts_on_input(p):
                raise ValueError(f"scheme.parts[{i}] ({p.name}) acts on the input embedding, which is computed "
                                 "once before all layers: a per-layer pattern cannot hold it; combine it with "
                                 "scheme=hybrid instead")
        super().__init__(options, shape, parts)
        # chunks are fixed in absolute position: a chunked pattern is not a function of i − j alone
        self.relative = all(p.relative for p in parts) and not (options.window and options.chunked)  # type: ignore[misc]
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
        """The layer's part's bias (H, Tq, Tk), plus −∞ for the keys a local layer does not see."""
        bias = self.part(layer).score_bias(q_pos, k_pos, layer)
        o = self.options
        if not o.window or o.pattern[layer % len(o.pattern)] not in o.local_parts:
            return bias
        if o.chunked:
            outside = (q_pos[:, None] // o.window) != (k_pos[None, :] // o.window)
        else:
            outside = (q_pos[:, None] - k_pos[None, :]) >= o.window
        local = torch.zeros(self.shape.n_heads, *outside.shape, device=q_pos.device)
        local.masked_fill_(outside, float("-inf"))
        return local if bias is None else bias + local

    def attention_weights(self, logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                          layer: int) -> torch.Tensor | None:
        return self.part(layer).attention_weights(logits, q_pos, k_pos, layer)

    def input_bias(self, x: torch.Tensor, layer: int) -> torch.Tensor | None:
        return self.part(layer).input_bias(x, layer)

    def token_terms(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, layer: int) -> torch.Tensor | None:
        return self.part(layer).token_terms(x, q, k, layer)

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        return self.part(layer).score_terms(q, k, q_pos, k_pos, layer)

    def value_terms(self, probs: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        return self.part(layer).value_terms(probs, q_pos, k_pos, layer)

    def bias_by_distance(self) -> bool:
        return super().bias_by_distance() and not (self.options.window and self.options.chunked)

    def flex_problem(self) -> str | None:
        if self.options.window:
            return "its local attention windows have no score_mod"
        return super().flex_problem()

    def score_mod(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, layer: int):
        return self.part(layer).score_mod(q, k, positions, layer)

    def label(self) -> str:
        """``layered`` with its defaults; otherwise the layers' schemes in pattern order, e.g. ``rope/alibi``."""
        local = options_label("", self.options, skip=("parts", "pattern"))  # "[window=16,chunked=True]" or ""
        if self.options.parts == LayeredOptions().parts and self.options.pattern == LayeredOptions().pattern:
            return self.name + local
        return "/".join(options_label(self.parts[i].name, self.parts[i].options) for i in self.options.pattern) + local
