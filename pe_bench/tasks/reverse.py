"""Reverse (Kazemnejad et al. 2023; Ruoss et al. 2023): ``BOS a₁…a_k SEP a_k…a₁`` — a random string, a separator,
the string reversed."""

from __future__ import annotations

import numpy as np

from pe_bench.tasks.copy import Copy


class Reverse(Copy):
    name = "reverse"
    description = "a random string, a separator, the string reversed"
    recipe = "task_long"  # 5000 steps at lr 1e-3: NoPE had 47.8 % exact match at L after 5000 at 3e-3

    def answer_of(self, string: np.ndarray) -> np.ndarray:
        return string[::-1]
