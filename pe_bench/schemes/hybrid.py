"""Composition of schemes: each hook of a ``Composite`` applies its parts in order (embeddings and q/k chained,
biases and score terms added). ``hybrid`` is the composite the explainers describe: absolute sinusoidal positions at
the input plus a relative bias in attention (ALiBi by default; ``scheme.parts=[{name: sinusoidal},{name: t5}]``
composes others, each part with its own options)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pe_bench.schemes.base import REGISTRY, ModelShape, RowBias, Scheme, options_label, whole


def _sum(values: list[torch.Tensor | RowBias | None]) -> torch.Tensor | RowBias | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    present = [whole(v) for v in present]  # several parts: one whole sum
    total = present[0]
    for v in present[1:]:
        total = total + v
    return total


class Composite(Scheme):
    """A list of schemes acting together. Subclasses give it a name and build ``parts``."""

    def __init__(self, options: Any, shape: ModelShape, parts: list[Scheme]) -> None:
        super().__init__(options, shape)
        self.parts = nn.ModuleList(parts)
        self.bias_per_layer = any(p.bias_per_layer for p in parts)  # type: ignore[misc]

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        for p in self.parts:
            x = p.embed(x, positions)
        return x

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        for p in self.parts:
            q, k = p.rotate(q, k, positions, layer)
        return q, k

    def inherit(self, state: dict[str, torch.Tensor], prefix: str, how: str) -> None:
        for i, p in enumerate(self.parts):
            p.inherit(state, f"{prefix}parts.{i}.", how)

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor | None:
        return _sum([p.score_bias(q_pos, k_pos, layer) for p in self.parts])

    def input_bias(self, x: torch.Tensor, layer: int) -> torch.Tensor | None:
        return _sum([p.input_bias(x, layer) for p in self.parts])

    def token_terms(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, layer: int) -> torch.Tensor | None:
        return _sum([p.token_terms(x, q, k, layer) for p in self.parts])

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        return _sum([p.score_terms(q, k, q_pos, k_pos, layer) for p in self.parts])

    def value_terms(self, probs: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        return _sum([p.value_terms(probs, q_pos, k_pos, layer) for p in self.parts])

    def attention_weights(self, logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                          layer: int) -> torch.Tensor | None:
        return next((w for p in self.parts if (w := p.attention_weights(logits, q_pos, k_pos, layer)) is not None),
                    None)

    def has_score_terms(self) -> bool:
        return any(p.has_score_terms() for p in self.parts)

    def bias_by_distance(self) -> bool:
        return all(p.bias_by_distance() for p in self.parts if type(p).score_bias is not Scheme.score_bias)

    def flex_problem(self) -> str | None:
        return next((f"{p.name}: {r}" for p in self.parts if (r := p.flex_problem())), None)

    def score_mod(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, layer: int):
        mods = [m for p in self.parts if (m := p.score_mod(q, k, positions, layer)) is not None]
        if not mods:
            return None

        def mod(score, b, h, q_idx, kv_idx):
            for m in mods:
                score = m(score, b, h, q_idx, kv_idx)
            return score

        return mod


def check_part_names(parts: list[dict[str, Any]], composite: str) -> None:
    """Each part names a registered scheme other than the composite itself."""
    if not parts:
        raise ValueError("scheme.parts is empty; list the schemes to compose, e.g. [{name: sinusoidal}]")
    for i, part in enumerate(parts):
        name = part.get("name")
        if name not in REGISTRY or name == composite:
            raise ValueError(f"scheme.parts[{i}].name: {name!r} is not a scheme to compose; choose from "
                             f"{', '.join(sorted(n for n in REGISTRY if n != composite))}")


def build_parts(parts: list[dict[str, Any]], shape: ModelShape) -> list[Scheme]:
    """The schemes of ``[{name: <scheme>, <option>: <value>, ...}, ...]``, each with its own options."""
    built = []
    for i, part in enumerate(parts):
        cls = REGISTRY[part["name"]]
        values = {k: v for k, v in part.items() if k != "name"}
        try:
            part_options = cls.Options(**values)
        except TypeError as e:
            raise ValueError(f"scheme.parts[{i}]: bad options for {part['name']}: {e}") from None
        try:
            built.append(cls(part_options, shape))
        except ValueError as e:  # the part's own checks name its options scheme.KEY: say which part
            raise ValueError(re.sub(r"\bscheme\.", f"scheme.parts[{i}].", str(e))) from None
    return built


@dataclass
class HybridOptions:
    # Each part: {name: <scheme>, <option>: <value>, ...}; options left out keep that scheme's defaults.
    parts: list[dict[str, Any]] = field(default_factory=lambda: [{"name": "sinusoidal"}, {"name": "alibi"}])

    def __post_init__(self) -> None:
        check_part_names(self.parts, "hybrid")


class Hybrid(Composite):
    name = "hybrid"
    description = "composed: sinusoidal absolute positions at the input + ALiBi bias in attention (any parts)"
    citation = "composition of Vaswani et al. 2017 and Press et al. 2022 (see scheme.parts)"
    acts_on = ("input", "scores")
    Options = HybridOptions
    style = ("#9a9a00", "P")

    def __init__(self, options: HybridOptions, shape: ModelShape) -> None:
        super().__init__(options, shape, build_parts(options.parts, shape))

    def label(self) -> str:
        """``hybrid`` with its default parts; otherwise the parts' labels joined by '+', e.g. ``sinusoidal+t5``."""
        if self.options.parts == HybridOptions().parts:
            return self.name
        return "+".join(options_label(p.name, p.options) for p in self.parts)
