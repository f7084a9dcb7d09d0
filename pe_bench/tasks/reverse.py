"""Reverse (Kazemnejad et al. 2023; Ruoss et al. 2023): ``BOS a₁…a_k SEP a_k…a₁`` — a random string, a separator,
the string reversed."""

from __future__ import annotations

import numpy as np

from pe_bench.tasks.copy import Copy


class Reverse(Copy):
    name = "reverse"
    description = "a random string, a separator, the string reversed"
    recipe = "task_long"  # RoPE: 5 % exact match at L after 3000 steps, 100 % after 5000

    def answer_of(self, string: np.ndarray) -> np.ndarray:
        return string[::-1]
