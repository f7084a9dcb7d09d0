"""Copy (Kazemnejad et al. 2023; Ruoss et al. 2023): ``BOS a₁…a_k SEP a₁…a_k`` — a random string, a separator, the
string again."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, MAX_SYMBOLS, SEP, SYMBOL0, SyntheticOptions, SyntheticTask


@dataclass
class CopyOptions(SyntheticOptions):
    symbols: int = ranged(16, ge=2, le=MAX_SYMBOLS)  # the string alphabet


class Copy(SyntheticTask):
    name = "copy"
    description = "a random string, a separator, the string again"
    citation = "Kazemnejad et al. 2023; Ruoss et al. 2023"
    Options = CopyOptions
    length_step = 2
    # From GPT-2's init at lr 3e-3 RoPE stopped at 94.8 % exact match at L; from fan_in at lr 1e-3, 99.5 % in 3000
    # steps, where NoPE stopped at 93.0 % and reached 96.0 % in 5000 (results/tasks/TUNING.md, fourth and fifth
    # sittings). Reverse inherits the model and the recipe.
    recipe = "task_long"
    model = "tiny_fan_in"

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.symbols

    def max_size(self, n: int) -> int:
        return (n - 1) // 2  # BOS + k + SEP + k = n + 1

    def chance(self, n: int) -> float:
        return float(self.cfg.symbols) ** -self.max_size(n)

    def answer_of(self, string: np.ndarray) -> np.ndarray:
        return string

    def example(self, rng, size, depth, split):
        string = SYMBOL0 + rng.integers(0, self.cfg.symbols, size=size)
        out = self.answer_of(string)
        tokens = [BOS, *string, SEP, *out]
        answer = [False] * (size + 2) + [True] * size
        return tokens, answer, string.astype(np.uint16).tobytes()
